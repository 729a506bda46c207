/**
 * pipeline: a DAG of stages (schema/pipeline.ts) as one workflow whose run stages are
 * trainingRun child workflows, each under the run id `<pipeline id>.<stage>`, and whose export
 * stages are one activity each (idempotent: a directory that holds the version is kept).
 *
 *   check the pipeline -> start every stage whose `after` have ended
 *   per stage: ask the store about its run: completed or stopped -> kept (never rerun);
 *              stored but unfinished -> the child resumes it at its last committed step;
 *              none -> the child starts it, with references to earlier stages resolved
 *   a failed stage: no new stage starts, the running ones end, the pipeline fails naming it
 *
 * So a pipeline started again under its id (troupe resume, or the Temporal UI with the same
 * input) continues at the stage and step where it stopped. Children close with the pipeline
 * (Temporal's default parent-close policy), so no stage runs without it.
 */
import { ApplicationFailure, executeChild, proxyActivities, setCurrentDetails, setHandler, workflowInfo } from '@temporalio/workflow';
import type { StageActivities } from '../activities/training/stages';
import {
  parsePipeline,
  PipelineError,
  readyStages,
  stageExport,
  stageRunConfig,
  stageRunId,
  type Pipeline,
  type PipelineStage,
  type StageOutcome,
} from '../schema/pipeline';
import { exportText, pipelineStatusQuery, type PipelineStageView, type PipelineStatusView } from './definitions';
import { controlActivities, exportActivities } from './timeouts';
import type { trainingRun } from './training-run';

const stages = proxyActivities<StageActivities>(controlActivities);
const exporting = proxyActivities<StageActivities>(exportActivities);

export interface PipelineSummary {
  pipelineId: string;
  name: string;
  stages: Array<{ name: string; runId: string; state: PipelineStageView['state']; steps: number; export?: PipelineStageView['export'] }>;
}

export async function pipeline(input: unknown): Promise<PipelineSummary> {
  let p: Pipeline;
  try {
    p = parsePipeline(input);
  } catch (e) {
    if (!(e instanceof PipelineError)) throw e;
    throw ApplicationFailure.create({ message: e.message, type: 'InvalidPipeline', nonRetryable: true, details: [e.issues] });
  }
  const pipelineId = workflowInfo().workflowId;
  const view: PipelineStatusView = {
    pipelineId,
    name: p.name,
    status: 'running',
    stages: [],
  };
  // An export stage shows the run it exports from: a run id, or the run of the (earlier) stage it names.
  const shownRunId = (s: PipelineStage): string => {
    const from = s.export?.run;
    if (!s.export) return stageRunId(pipelineId, s.name);
    if (typeof from === 'string') return from;
    return view.stages.find((v) => v.name === (from as { $run: string }).$run)?.runId ?? '';
  };
  for (const s of p.stages) view.stages.push({ name: s.name, after: s.after, runId: shownRunId(s), state: 'waiting' });
  const stageView = (name: string) => view.stages.find((s) => s.name === name) as PipelineStageView;
  const publish = () => setCurrentDetails(detailsOf(view));
  setHandler(pipelineStatusQuery, () => view);
  publish();

  const ended: Record<string, StageOutcome> = {};
  const started = new Set<string>();
  const running = new Map<string, Promise<void>>();
  let failed: { stage: string; message: string } | undefined;

  const exportStage = async (stage: PipelineStage) => {
    const v = stageView(stage.name);
    v.state = 'running';
    publish();
    const r = await exporting.exportStage({ ...stageExport(stage, ended), stage: stage.name });
    ended[stage.name] = { runId: r.runId, step: r.version - 1 };
    Object.assign(v, { runId: r.runId, state: r.kept ? 'kept' : 'completed', export: { model: r.model, version: r.version, out: r.out } });
  };

  const runStage = async (stage: PipelineStage) => {
    if (stage.export) return exportStage(stage);
    const v = stageView(stage.name);
    const runId = v.runId;
    const before = await stages.stageRunState({ runId });
    if (before.status === 'completed' || before.status === 'stopped') {
      ended[stage.name] = { runId, step: before.step };
      Object.assign(v, { state: 'kept', steps: before.step + 1 });
      return;
    }
    v.state = 'running';
    publish();
    const config = stageRunConfig(pipelineId, stage, ended);
    const summary = await executeChild<typeof trainingRun>('trainingRun', {
      workflowId: runId,
      args: before.status === null ? [config] : [config, null, { resume: true }],
      staticSummary: `pipeline ${pipelineId}, stage ${stage.name}`,
    });
    const after = await stages.stageRunState({ runId });
    ended[stage.name] = { runId, step: after.step };
    Object.assign(v, { state: summary.status, steps: after.step + 1, ...(summary.finalEval ? { eval: summary.finalEval.success } : {}) });
  };

  for (;;) {
    if (!failed)
      for (const stage of readyStages(p, new Set(Object.keys(ended)), started)) {
        started.add(stage.name);
        const done = runStage(stage)
          .catch((e: unknown) => {
            const message = causeMessage(e);
            Object.assign(stageView(stage.name), { state: 'failed', error: message });
            failed ??= { stage: stage.name, message };
          })
          .finally(() => {
            running.delete(stage.name);
            publish();
          });
        running.set(stage.name, done);
      }
    if (running.size === 0) break;
    await Promise.race(running.values());
  }

  if (failed) {
    view.status = 'failed';
    publish();
    throw ApplicationFailure.create({
      message: `stage ${failed.stage} failed: ${failed.message}`,
      type: 'PipelineStageFailed',
      nonRetryable: true,
      details: [{ stage: failed.stage, runId: stageRunId(pipelineId, failed.stage) }],
    });
  }
  view.status = 'completed';
  publish();
  return {
    pipelineId,
    name: p.name,
    stages: view.stages.map((s) => ({ name: s.name, runId: s.runId, state: s.state, steps: s.steps ?? 0, ...(s.export ? { export: s.export } : {}) })),
  };
}

/** The innermost cause's message (a child's failure wraps the run's own). */
function causeMessage(e: unknown): string {
  let at: unknown = e;
  while (at instanceof Error && at.cause instanceof Error) at = at.cause;
  return at instanceof Error ? at.message : String(at);
}

/** The pipeline as Markdown for the Temporal UI's Current Details. */
function detailsOf(v: PipelineStatusView): string {
  const rows = v.stages.map(
    (s) =>
      `| ${s.name} | ${s.after.join(', ') || '-'} | ${s.state}${s.steps !== undefined ? ` (${s.steps} step${s.steps === 1 ? '' : 's'})` : ''}${s.eval !== undefined ? `, eval ${s.eval.toFixed(3)}` : ''}${s.export ? `, ${exportText(s.export)}` : ''}${s.error ? `: ${s.error}` : ''} | ${s.runId} |`,
  );
  return [`**pipeline ${v.name}**: ${v.status}`, '', '| stage | after | state | run |', '| --- | --- | --- | --- |', ...rows].join('\n');
}
