// Environment configuration, parsed once with zod. Every error names the variable.
//
//   import { loadConfig } from '../infra/config';
//   const config = loadConfig();            // throws ConfigError (a TroupeError) on bad input
//
// The table in README.md ("Configuration") lists the same variables; keep them in step.
import * as path from 'node:path';
import { z } from 'zod';
import { DEFAULT_POOL } from '../agents/model';
import { TroupeError } from './errors';
import { repoRoot } from './paths';

/** A configuration problem: `variable` is the environment variable at fault. */
export class ConfigError extends TroupeError {
  readonly variable: string;
  constructor(variable: string, message: string, hint?: string) {
    super(`${variable}: ${message}`, hint);
    this.variable = variable;
  }
}

// Empty strings count as unset (`FOO= npx troupe up`).
const unsetIfEmpty = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);
const optionalString = z.preprocess(unsetIfEmpty, z.string().trim().optional());
const stringWithDefault = (d: string) => z.preprocess(unsetIfEmpty, z.string().trim().default(d));

const port = (d: number) =>
  z.preprocess(
    unsetIfEmpty,
    z
      .string()
      .trim()
      .regex(/^\d+$/, 'must be a port number (1-65535)')
      .transform(Number)
      .refine((n) => n >= 1 && n <= 65535, 'must be a port number (1-65535)')
      .default(d),
  );

const hostPort = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be host:port, e.g. 127.0.0.1:7233 or temporal.example.com:7233')
    .optional(),
);

const postgresUrl = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .superRefine((value, ctx) => {
      let url: URL;
      try {
        url = new URL(value);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'is not a valid URL' });
        return;
      }
      if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
        ctx.addIssue({ code: 'custom', message: `must start with postgres:// (got ${url.protocol}//)` });
      } else if (!url.hostname && !url.searchParams.get('host')) {
        ctx.addIssue({ code: 'custom', message: 'has no host' });
      }
    })
    .optional(),
);

const byteCount = (d: number) =>
  z.preprocess(
    unsetIfEmpty,
    z
      .string()
      .trim()
      .regex(/^\d+$/, 'must be a whole number of bytes (0 = every version to files)')
      .transform(Number)
      .default(d),
  );

const device = z.preprocess(
  unsetIfEmpty,
  z
    .string()
    .trim()
    .regex(/^(auto|cpu|cuda|cuda:\d+)$/, 'must be auto, cpu, cuda or cuda:N')
    .default('auto'),
);

const schema = z.object({
  TEMPORAL_ADDRESS: hostPort,
  TEMPORAL_NAMESPACE: stringWithDefault('default'),
  TROUPE_TEMPORAL_BIN: optionalString,
  DATABASE_URL: postgresUrl,
  TROUPE_STATE_DIR: optionalString,
  TROUPE_CHECKPOINT_DIR: optionalString,
  TROUPE_CHECKPOINT_INLINE_MAX_BYTES: byteCount(1 << 20),
  TROUPE_TASK_QUEUE: stringWithDefault('troupe'),
  TROUPE_POOL_TASK_QUEUE: stringWithDefault(DEFAULT_POOL),
  TROUPE_DEVICE: device,
  TROUPE_TEMPORAL_PORT: port(7233),
  TROUPE_TEMPORAL_UI_PORT: port(8233),
  TROUPE_POSTGRES_PORT: port(54329),
  TROUPE_DASHBOARD_PORT: port(8234),
  TROUPE_DASHBOARD_HOST: stringWithDefault('127.0.0.1'),
  TROUPE_DASHBOARD_TOKEN: optionalString,
});

export interface TroupeConfig {
  /** Attach to this Temporal server instead of starting the dev server (TEMPORAL_ADDRESS). */
  temporalAddress?: string;
  /** Temporal namespace (TEMPORAL_NAMESPACE). */
  namespace: string;
  /** Explicit path of the `temporal` CLI binary (TROUPE_TEMPORAL_BIN). */
  temporalBin?: string;
  /** External PostgreSQL; unset means the embedded one (DATABASE_URL). */
  databaseUrl?: string;
  /** Absolute folder for pid files, logs, the dev server's SQLite file, the embedded Postgres (TROUPE_STATE_DIR). */
  stateDir: string;
  /** Folder of the checkpoint store's files (TROUPE_CHECKPOINT_DIR; default <stateDir>/checkpoints). Every pool worker and engine of a cluster must see it at the same path. */
  checkpointDir: string;
  /** Versions up to this many bytes (weights + optimizer state) stay inline in Postgres (TROUPE_CHECKPOINT_INLINE_MAX_BYTES). */
  checkpointInlineMaxBytes: number;
  /** Control task queue: workflows and control activities (TROUPE_TASK_QUEUE). */
  taskQueue: string;
  /** Task queue that serves the default pool (TROUPE_POOL_TASK_QUEUE): `up`'s pool worker polls it, runs send its models' work there. */
  poolTaskQueue: string;
  /** Device for the pool worker's engine: auto | cpu | cuda | cuda:N (TROUPE_DEVICE). */
  device: string;
  /** gRPC port of the dev server `up` starts (TROUPE_TEMPORAL_PORT). */
  temporalPort: number;
  /** Web UI port of the dev server (TROUPE_TEMPORAL_UI_PORT). */
  temporalUiPort: number;
  /** Port of the embedded PostgreSQL (TROUPE_POSTGRES_PORT). */
  postgresPort: number;
  /** Port and address of the dashboard `up` starts (TROUPE_DASHBOARD_PORT, TROUPE_DASHBOARD_HOST: loopback unless set). */
  dashboardPort: number;
  dashboardHost: string;
  /** Enables the dashboard's run controls for requests that carry it (TROUPE_DASHBOARD_TOKEN); unset: controls refused. */
  dashboardToken?: string;
}

const hints: Record<string, string> = {
  TEMPORAL_ADDRESS: 'set it to host:port of a running Temporal frontend, or unset it to let Troupe start a local dev server',
  DATABASE_URL:
    'set it like postgres://user:password@host:5432/dbname, or unset it to use the embedded PostgreSQL under TROUPE_STATE_DIR',
  TROUPE_DEVICE: 'use auto (CUDA if available, else CPU), cpu, cuda or cuda:0',
};

/** Parse Troupe's configuration from an environment (default: process.env). Throws ConfigError. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): TroupeConfig {
  const result = schema.safeParse(env);
  if (!result.success) {
    const issue = result.error.issues[0];
    const variable = String(issue.path[0] ?? 'environment');
    const others = result.error.issues.length - 1;
    const hint = [hints[variable], others > 0 ? `${others} more problem(s) after this one` : undefined]
      .filter(Boolean)
      .join('; ');
    throw new ConfigError(variable, issue.message, hint || `fix or unset ${variable}`);
  }
  const e = result.data;
  const stateDir = path.resolve(e.TROUPE_STATE_DIR ?? path.join(repoRoot, '.troupe'));
  return {
    temporalAddress: e.TEMPORAL_ADDRESS,
    namespace: e.TEMPORAL_NAMESPACE,
    temporalBin: e.TROUPE_TEMPORAL_BIN,
    databaseUrl: e.DATABASE_URL,
    stateDir,
    checkpointDir: path.resolve(e.TROUPE_CHECKPOINT_DIR ?? path.join(stateDir, 'checkpoints')),
    checkpointInlineMaxBytes: e.TROUPE_CHECKPOINT_INLINE_MAX_BYTES,
    taskQueue: e.TROUPE_TASK_QUEUE,
    poolTaskQueue: e.TROUPE_POOL_TASK_QUEUE,
    device: e.TROUPE_DEVICE,
    temporalPort: e.TROUPE_TEMPORAL_PORT,
    temporalUiPort: e.TROUPE_TEMPORAL_UI_PORT,
    postgresPort: e.TROUPE_POSTGRES_PORT,
    dashboardPort: e.TROUPE_DASHBOARD_PORT,
    dashboardHost: e.TROUPE_DASHBOARD_HOST,
    dashboardToken: e.TROUPE_DASHBOARD_TOKEN,
  };
}

/** The address clients use: TEMPORAL_ADDRESS, else the local dev server's port. */
export function temporalAddressOf(config: TroupeConfig): string {
  return config.temporalAddress ?? `127.0.0.1:${config.temporalPort}`;
}

/** A postgres URL with its password replaced by `***`, for printing. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}
