/**
 * The workflow bundle and broken teams. Webpack compiles every team module the
 * registry can `require`; by default one that does not compile (a syntax
 * error) fails the whole bundle, and with it the control worker and every run.
 * This hook turns such an error into a warning: webpack then emits that module
 * as one that throws when it is required, i.e. when its team is loaded, which
 * the registry reports as that team's TeamLoadError.
 */
import * as path from 'node:path';
import type { WorkerOptions } from '@temporalio/worker';
import { TEAMS_DIR } from './team-code';

type WebpackConfig = Parameters<NonNullable<NonNullable<WorkerOptions['bundlerOptions']>['webpackConfigHook']>>[0];

interface BuildError {
  module?: { resource?: string };
}

export function isolateTeamBuildErrors(config: WebpackConfig): WebpackConfig {
  const plugin = {
    apply(compiler: { hooks: { afterCompile: { tap(name: string, fn: (c: { errors: BuildError[]; warnings: BuildError[] }) => void): void } } }) {
      compiler.hooks.afterCompile.tap('troupe-isolate-team-build-errors', (compilation) => {
        for (let i = compilation.errors.length - 1; i >= 0; i--) {
          const resource = compilation.errors[i]!.module?.resource ?? '';
          if (resource.startsWith(TEAMS_DIR + path.sep)) compilation.warnings.push(...compilation.errors.splice(i, 1));
        }
      });
    },
  };
  return { ...config, plugins: [...(config.plugins ?? []), plugin as never] };
}
