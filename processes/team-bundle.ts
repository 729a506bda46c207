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
 */
import * as path from 'node:path';
import type { WorkerOptions } from '@temporalio/worker';
import { repoRoot } from '../infra/paths';
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
