/**
 * Webpack settings of the workflow bundle (the control worker's `webpackConfigHook`).
 *
 * Broken teams: webpack compiles every team module the registry can `require`; by
 * default one that does not compile (a syntax error) fails the whole bundle, and with
 * it the control worker and every run. This hook turns such an error into a warning:
 * webpack then emits that module as one that throws when it is required, i.e. when its
 * team is loaded, which the registry reports as that team's TeamLoadError. Team code is
 * a project's files outside node_modules and its .troupe/.
 *
 * Troupe installed as a package: Temporal's bundler compiles TypeScript except under
 * node_modules, and Troupe ships its TypeScript sources; its own folder is compiled too.
 *
 * Build cache (`bundleCache`): webpack's persistent cache in `<cacheDir>/workflow-bundle/`,
 * one folder per project, so a control worker that starts again (a restart, `troupe up`, a
 * crash) rebuilds only what changed: 1.1 s of CPU instead of 4 s here. Webpack checks every
 * module and resolution against the cache by content hash, so an edited team is rebuilt. One
 * process at a time uses a folder (a lock file naming its pid); another bundles without it
 * rather than read a cache being written. A folder whose project is gone (a test's temporary
 * project, a deleted checkout) is removed by the next process that bundles. TROUPE_BUNDLE_CACHE=0
 * turns it off.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { WorkerOptions } from '@temporalio/worker';
import { tryLockFile } from '../stack/lock';
import { cacheDir, repoRoot } from '../infra/paths';
import { activeProject } from './project';

type WebpackConfig = Parameters<NonNullable<NonNullable<WorkerOptions['bundlerOptions']>['webpackConfigHook']>>[0];

interface BuildError {
  module?: { resource?: string };
}

/** Whether a build error in `resource` is one team's problem rather than the bundle's. */
export function isTeamCode(resource: string, projectDir = activeProject()?.dir): boolean {
  if (!projectDir || !resource.startsWith(projectDir + path.sep)) return false;
  const inside = path.relative(projectDir, resource).split(path.sep);
  return !inside.includes('node_modules') && inside[0] !== '.troupe';
}

export function isolateTeamBuildErrors(config: WebpackConfig): WebpackConfig {
  const plugin = {
    apply(compiler: { hooks: { afterCompile: { tap(name: string, fn: (c: { errors: BuildError[]; warnings: BuildError[] }) => void): void } } }) {
      compiler.hooks.afterCompile.tap('troupe-isolate-team-build-errors', (compilation) => {
        for (let i = compilation.errors.length - 1; i >= 0; i--) {
          const resource = compilation.errors[i]!.module?.resource ?? '';
          if (isTeamCode(resource)) compilation.warnings.push(...compilation.errors.splice(i, 1));
        }
      });
    },
  };
  return { ...compileTroupeSources(config), plugins: [...(config.plugins ?? []), plugin as never] };
}

/** The TypeScript rule excludes node_modules; keep it from excluding Troupe's own sources when Troupe is installed there. */
function compileTroupeSources(config: WebpackConfig): WebpackConfig {
  const own = repoRoot + path.sep;
  const rules = (config.module?.rules ?? []).map((rule) => {
    const r = rule as { test?: unknown; exclude?: unknown };
    if (!(r.test instanceof RegExp) || !r.test.test('x.ts') || !(r.exclude instanceof RegExp)) return rule;
    const excluded = r.exclude;
    return { ...r, exclude: (file: string) => excluded.test(file) && !file.startsWith(own) } as typeof rule;
  });
  return { ...config, module: { ...config.module, rules } };
}

/** A workflow bundle's webpack hook: team errors isolated, and the build cache while this process holds it. */
export interface BundleCache {
  hook(config: WebpackConfig): WebpackConfig;
  /** whether this process holds the cache (else it bundles without one) */
  readonly held: boolean;
  /** ends this process's use of the cache: call when the bundle is built */
  release(): void;
}

/** The cache folder of the active project (the bundle's inputs differ by project). */
export function bundleCacheDir(projectDir = activeProject()?.dir ?? process.cwd(), env: NodeJS.ProcessEnv = process.env): string {
  const key = createHash('sha256').update(`${projectDir}\0${repoRoot}`).digest('hex').slice(0, 16);
  return path.join(cacheDir(env), 'workflow-bundle', key);
}

/** Removes the cache folders (beside `dir`) whose project no longer exists and that no live process holds. */
function pruneGoneProjects(dir: string): void {
  const parent = path.dirname(dir);
  for (const name of fs.readdirSync(parent)) {
    if (!name.endsWith('.project')) continue;
    const folder = path.join(parent, name.slice(0, -'.project'.length));
    if (folder === dir || fs.existsSync(fs.readFileSync(`${folder}.project`, 'utf8'))) continue;
    const release = tryLockFile(`${folder}.lock`);
    if (typeof release !== 'function') continue; // in use
    fs.rmSync(folder, { recursive: true, force: true });
    fs.rmSync(`${folder}.project`, { force: true });
    release();
  }
}

export function bundleCache(dir = bundleCacheDir(), env: NodeJS.ProcessEnv = process.env, projectDir = activeProject()?.dir ?? process.cwd()): BundleCache {
  let release: (() => void) | undefined;
  if (env.TROUPE_BUNDLE_CACHE !== '0') {
    try {
      const got = tryLockFile(`${dir}.lock`);
      if (typeof got === 'function') {
        release = got;
        fs.writeFileSync(`${dir}.project`, projectDir);
        pruneGoneProjects(dir);
      }
    } catch {
      /* a cache is an optimisation: without one (or its pruning) the bundle is the same */
    }
  }
  return {
    get held() {
      return release !== undefined;
    },
    hook: (config) => {
      const isolated = isolateTeamBuildErrors(config);
      if (!release) return isolated;
      return {
        ...isolated,
        // the bundler's own settings and versions are not files webpack can check: they key the cache
        cache: { type: 'filesystem', cacheDirectory: dir, version: cacheVersion(), buildDependencies: { troupe: [__filename] } },
        // content hashes, not timestamps: an edit within the same second is still seen
        snapshot: { module: { hash: true }, resolve: { hash: true }, buildDependencies: { hash: true }, resolveBuildDependencies: { hash: true } },
        infrastructureLogging: { level: 'error' },
      } as WebpackConfig;
    },
    release: () => {
      release?.();
      release = undefined;
    },
  };
}

function cacheVersion(): string {
  const version = (pkg: string) => {
    try {
      return (JSON.parse(fs.readFileSync(require.resolve(`${pkg}/package.json`), 'utf8')) as { version: string }).version;
    } catch {
      return '?';
    }
  };
  return `troupe ${version(path.join(repoRoot))} temporal ${version('@temporalio/worker')} node ${process.version}`;
}
