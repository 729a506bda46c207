/**
 * `import { connectTroupe } from 'troupe/client'`: drive runs from a program (a script, a
 * notebook, a service) the way the CLI does, over the same validated workflow handlers and
 * the project's connection settings (troupe.config.ts `stack`, then the environment). The
 * stack must be up (`npx troupe up`, or any `troupe train`). Errors are TroupeErrors with a
 * message naming the field and a hint, as on the command line.
 */
import type { WorkflowHandle } from '@temporalio/client';
import type { RunStatus } from './activities/store/runs';
import { openRun, requireOpenRun, setOptimizer } from './control/open-run';
import { connectRuns, resumeRun, startTrainingRun, validateRunConfig, watchRun } from './control/runs';
import { runIdFor } from './control/run-id';
import { checkInitSourcesOf, forkBase } from './control/fork';
import { checkPipelineId, isPipeline, loadPipeline, pipelineIdFor, resumePipeline, startPipeline, watchPipeline } from './control/pipelines';
import { getRun } from './activities/store/runs';
import type { PipelineInput } from './schema/pipeline';
import type { PipelineSummary } from './workflows/pipeline';
import { TroupeError } from './infra/errors';
import { enterProjectFromEnvironment } from './processes/project';
import type { RunConfigInput } from './schema/run-config';
import {
  pauseSignal,
  pipelineStatusQuery,
  resumeSignal,
  statusQuery,
  stopSignal,
  type PipelineStatusView,
  type RunStatusView,
  type StopOptions,
} from './workflows/definitions';
import type { RunSummary, trainingRun } from './workflows/training-run';

export type { RunConfigInput, RunStatusView, RunSummary, RunStatus, PipelineInput, PipelineStatusView, PipelineSummary };

export interface RunRow {
  runId: string;
  team: string;
  status: RunStatus;
  createdAt: Date;
}

export interface TroupeClient {
  /** Validates the config against its team (every bad field named) and starts the run; `runId` defaults to `<team>-<time>-<random>`. */
  startRun(config: RunConfigInput): Promise<{ runId: string }>;
  /**
   * Forks run `parent` at its committed step `at`: a new run whose version 0 of each model is the version it served
   * after that step (weights and optimizer state, by reference), with `parent`'s config changed by `changes`.
   */
  forkRun(parent: string, at: number, changes?: Partial<RunConfigInput>): Promise<{ runId: string }>;
  /** Resolves with the run's summary when it closes; `onProgress` gets the status whenever its step, status or eval changes. */
  watchRun(runId: string, onProgress?: (status: RunStatusView) => void): Promise<RunSummary>;
  /** The live status of an open run, or undefined when its workflow is closed (see listRuns for the stored status). */
  status(runId: string): Promise<RunStatusView | undefined>;
  pause(runId: string): Promise<void>;
  /** Un-pauses an open run, or continues a run or pipeline that failed (a new execution, nothing lost or repeated). */
  resume(runId: string): Promise<void>;
  /**
   * Starts a pipeline: one of the project's (troupe.config.ts `pipelines`) by name, or `{ name, stages }`; every
   * stage's run config is checked against its team first. `id` defaults to `<name>-<time>-<random>`.
   */
  startPipeline(pipeline: string | PipelineInput, opts?: { id?: string }): Promise<{ pipelineId: string }>;
  /** Resolves with the pipeline's summary when it completes (rejects naming the stage when one fails). */
  watchPipeline(pipelineId: string): Promise<PipelineSummary>;
  /** The stages of a pipeline and their states (open or closed, while its workflow's history is kept). */
  pipelineStatus(pipelineId: string): Promise<PipelineStatusView>;
  /** Stops after the step in flight and a final eval; with `{ now: true }`, cancels the step in flight and skips the eval. */
  stop(runId: string, opts?: StopOptions): Promise<void>;
  /** A setOptimizer change (e.g. `{ models: { policy: { lr: 5e-4 } } }`), checked against the run's team first. */
  setOptimizer(runId: string, change: unknown): Promise<{ effectiveStep: number }>;
  /** Runs in the store, newest first. */
  listRuns(limit?: number): Promise<RunRow[]>;
  close(): Promise<void>;
}

/** Connects to the stack of the project at `project` (default: the one above the working directory). */
export async function connectTroupe(opts: { project?: string; log?: (line: string) => void } = {}): Promise<TroupeClient> {
  enterProjectFromEnvironment(opts.project ? { cwd: opts.project } : {});
  const log = opts.log ?? (() => undefined);
  const c = await connectRuns(log);
  const handle = (runId: string) => c.client.workflow.getHandle<typeof trainingRun>(runId);
  return {
    async startRun(input) {
      if (typeof input?.team !== 'string') throw new TroupeError('startRun: team: required', "name one of the project's teams");
      const runId = input.runId ?? runIdFor(input.team);
      const config = validateRunConfig({ ...input, runId });
      await checkInitSourcesOf(c.sql, config);
      await startTrainingRun(c.client, c.config.taskQueue, config);
      return { runId };
    },
    async forkRun(parent, at, changes = {}) {
      const base = await forkBase(c.sql, parent, at, 'at');
      const runId = changes.runId ?? runIdFor(base.team);
      const config = validateRunConfig({ ...base, ...changes, team: base.team, fork: base.fork, runId });
      await checkInitSourcesOf(c.sql, config, 'at');
      await startTrainingRun(c.client, c.config.taskQueue, config);
      return { runId };
    },
    async watchRun(runId, onProgress) {
      const h: WorkflowHandle<typeof trainingRun> = handle(runId);
      let done = false;
      let last = '';
      const poll = (async () => {
        while (!done) {
          try {
            const v = await h.query(statusQuery);
            const key = JSON.stringify([v.step, v.status, v.lastEval]);
            if (key !== last) onProgress?.(v);
            last = key;
          } catch {
            /* not started yet, between executions, or closed */
          }
          await new Promise((r) => setTimeout(r, 500));
        }
      })();
      try {
        return await watchRun(h, { quiet: true });
      } finally {
        done = true;
        await poll;
      }
    },
    async status(runId) {
      return (await openRun(c, runId))?.view;
    },
    async pause(runId) {
      await (await requireOpenRun(c, runId, 'pause')).handle.signal(pauseSignal);
    },
    async resume(runId) {
      if (!(await getRun(c.sql, runId)) && (await isPipeline(c, runId))) {
        await resumePipeline(c, runId);
        return;
      }
      const open = await openRun(c, runId);
      if (open) await open.handle.signal(resumeSignal);
      else await resumeRun(c.client, c.sql, c.config.taskQueue, runId);
    },
    async startPipeline(pipeline, opts = {}) {
      const p = loadPipeline(pipeline);
      const pipelineId = opts.id ?? pipelineIdFor(p.name);
      checkPipelineId(pipelineId, 'id');
      await startPipeline(c, p, pipelineId);
      return { pipelineId };
    },
    async watchPipeline(pipelineId) {
      return watchPipeline(c.client.workflow.getHandle(pipelineId), log);
    },
    async pipelineStatus(pipelineId) {
      return c.client.workflow.getHandle(pipelineId).query(pipelineStatusQuery);
    },
    async stop(runId, opts = {}) {
      await (await requireOpenRun(c, runId, 'stop')).handle.signal(stopSignal, opts);
    },
    async setOptimizer(runId, change) {
      return setOptimizer(c, await requireOpenRun(c, runId, 'setOptimizer'), runId, change);
    },
    async listRuns(limit = 100) {
      const rows = await c.sql`SELECT run_id, team, status, created_at FROM runs ORDER BY created_at DESC LIMIT ${limit}`;
      return rows.map((r) => ({ runId: r.run_id as string, team: r.team as string, status: r.status as RunStatus, createdAt: r.created_at as Date }));
    },
    close: () => c.close(),
  };
}
