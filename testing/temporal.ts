// A real Temporal dev server for integration tests, from the same binary users get
// (stack/temporal.ts: TROUPE_TEMPORAL_BIN → PATH → cache → go install). With
// TEMPORAL_ADDRESS set, tests attach to that server instead.
import { randomBytes } from 'node:crypto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleCache } from '../processes/team-bundle';
import { workflowsPath } from '../processes/control-worker';
import { enterProjectFromEnvironment } from '../processes/project';
import { TROUPE_SEARCH_ATTRIBUTE_KEYS } from '../infra/search-attributes';
import { ensureTemporalBinary } from '../stack/temporal';

export interface StartTemporalOptions {
  namespace?: string;
  /** Persist to this SQLite file (default: in memory). */
  dbFilename?: string;
  /** Extra `temporal server start-dev` arguments. */
  extraArgs?: string[];
  /** Serve the Web UI on this port (default: no UI). */
  uiPort?: number;
}

let runtimeInstalled = false;

/** Workers in tests log warnings and errors only (TROUPE_TEST_LOG=INFO|DEBUG for more). */
function installQuietRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    const level = (process.env.TROUPE_TEST_LOG ?? 'WARN').toUpperCase() as 'WARN';
    Runtime.install({ logger: new DefaultLogger(level) });
  } catch {
    /* a Runtime already exists (installed by the test itself): keep it */
  }
}

/** Start a dev server on free ports (with Troupe's search attributes), or attach to TEMPORAL_ADDRESS. */
export async function startTemporal(opts: StartTemporalOptions = {}): Promise<TestWorkflowEnvironment> {
  installQuietRuntime();
  const address = process.env.TEMPORAL_ADDRESS?.trim();
  if (address) {
    return TestWorkflowEnvironment.createFromExistingServer({
      address,
      namespace: opts.namespace ?? process.env.TEMPORAL_NAMESPACE ?? 'default',
    });
  }
  const bin = await ensureTemporalBinary();
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: bin.path },
      ip: '127.0.0.1',
      namespace: opts.namespace ?? 'default',
      dbFilename: opts.dbFilename,
      searchAttributes: [...TROUPE_SEARCH_ATTRIBUTE_KEYS],
      extraArgs: opts.extraArgs,
      ...(opts.uiPort ? { ui: true, uiPort: opts.uiPort } : {}),
    },
  });
}

/** A task queue name no other test uses. */
export function uniqueTaskQueue(prefix = 'test'): string {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;

/**
 * workflows/ with the project's teams, bundled once per test process (pass as `workflowBundle` to
 * skip re-bundling per worker). The process enters its project first, as every Troupe process does
 * (in a checkout: the examples project).
 */
export function workflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  enterProjectFromEnvironment({ required: false });
  if (!bundle) {
    const cache = bundleCache();
    bundle = bundleWorkflowCode({ workflowsPath: workflowsPath(), logger: quietLogger, webpackConfigHook: cache.hook }).finally(() => cache.release());
  }
  return bundle;
}

const noop = () => undefined;
const quietLogger = { trace: noop, debug: noop, info: noop, warn: console.warn, error: console.error, log: noop };
