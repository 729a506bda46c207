/**
 * Pipelines from a program or the CLI (troupe pipeline, troupe resume, the client): the
 * pipeline checked with every stage's run config against its team before anything starts,
 * started as a `pipeline` workflow under its id, watched stage by stage, and started again
 * under the same id and input to continue one that failed or was terminated.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { defaultPayloadConverter, WorkflowFailedError, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import { TroupeError } from '../infra/errors';
import { FieldError } from '../infra/issues';
import { activeProject } from '../processes/project';
import { parsePipeline, PIPELINE_ID, stageRunConfig, stageRunId, type Pipeline, type PipelineInput } from '../schema/pipeline';
import { exportText, pipelineStatusQuery, statusQuery, type PipelineStatusView } from '../workflows/definitions';
import type { pipeline as pipelineWorkflow, PipelineSummary } from '../workflows/pipeline';
import { runIdFor } from './run-id';
import { innermostCause, progressLine, validateRunConfig, type Connected } from './runs';

/**
 * The pipeline `ref` names: a JSON file ({ name?, stages }), else one of the project's (troupe.config.ts
 * `pipelines`); or `ref` itself, checked, where it is a pipeline's { name, stages }.
 */
export function loadPipeline(ref: string | PipelineInput): Pipeline {
  if (typeof ref !== 'string') return checked(() => parsePipeline(ref), 'startPipeline');
  if (ref.endsWith('.json')) {
    let raw: unknown;
    try {
      raw = JSON.parse(fs.readFileSync(ref, 'utf8'));
    } catch (e) {
      throw new TroupeError(`${ref}: ${(e as Error).message}`, 'a pipeline file is JSON: { "name": ..., "stages": [{ "name": ..., "run": {...} }] }');
    }
    const fallbackName = ref.replace(/^.*[/\\]/, '').replace(/\.json$/, '');
    return checked(() => parsePipeline({ name: fallbackName, ...(raw as object) }), ref);
  }
  const pipelines = activeProject()?.config.pipelines ?? {};
  const p = pipelines[ref];
  if (!p) {
    const known = Object.keys(pipelines);
    throw new TroupeError(
      `no pipeline "${ref}"${known.length ? ` (this project has: ${known.join(', ')})` : ' in this project'}`,
      'declare it in troupe.config.ts `pipelines`, or name a .json file',
    );
  }
  return p;
}

function checked<T>(f: () => T, where: string): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof FieldError) throw new TroupeError(`${where}: ${e.message}`, 'see docs/running.md, "Pipelines"');
    throw e;
  }
}

/** Every stage's run config checked against its team, references standing in for the runs they will name. */
export function checkPipelineStages(p: Pipeline, pipelineId: string): void {
  const ended = Object.fromEntries(p.stages.map((s) => [s.name, { runId: stageRunId(pipelineId, s.name), step: 1 }]));
  for (const s of p.stages) {
    if (s.export) continue; // checked by parsePipeline; the run and model exist only once earlier stages ran
    try {
      validateRunConfig(stageRunConfig(pipelineId, s, ended));
    } catch (e) {
      if (e instanceof TroupeError) throw new TroupeError(`stage ${s.name}: ${e.message}`, e.hint);
      throw e;
    }
  }
}

/** Refuses a pipeline id that is not one, naming the field it came from (`--id`, `id`). */
export function checkPipelineId(id: string, field: string): void {
  if (!PIPELINE_ID.test(id)) throw new TroupeError(`${field}: letters, digits, . _ - only (1-60), got ${JSON.stringify(id)}`);
}

/** The default id of a new pipeline: `<name>-<time>-<random>`, as a run's is. */
export const pipelineIdFor = (name: string) => runIdFor(name);

export async function startPipeline(c: Connected, p: Pipeline, pipelineId: string) {
  checkPipelineStages(p, pipelineId);
  // An export stage's relative `out` is the starter's: resolved here, the workers get it absolute.
  const stages = p.stages.map((s) => (s.export ? { ...s, export: { ...s.export, out: path.resolve(s.export.out) } } : s));
  return c.client.workflow.start<typeof pipelineWorkflow>('pipeline', {
    taskQueue: c.config.taskQueue,
    workflowId: pipelineId,
    args: [{ name: p.name, stages }],
    staticSummary: `pipeline ${p.name}: ${p.stages.map((s) => s.name).join(' → ')}`,
  });
}

/** The newest workflow execution under `id`, or undefined where there is none. */
async function described(c: Connected, id: string) {
  try {
    return await c.client.workflow.getHandle(id).describe();
  } catch (e) {
    if (e instanceof WorkflowNotFoundError) return undefined;
    throw e;
  }
}

/** Whether `id` is a pipeline's workflow (and not a run's). */
export const isPipeline = async (c: Connected, id: string) => (await described(c, id))?.type === 'pipeline';
const isRunning = async (c: Connected, id: string) => (await described(c, id))?.status.name === 'RUNNING';

/**
 * Starts pipeline `id` again with the input of its last execution: its ended stages are kept,
 * an unfinished one resumes at its last committed step. Refused while it runs or once it completed.
 */
export async function resumePipeline(c: Connected, id: string) {
  const handle = c.client.workflow.getHandle<typeof pipelineWorkflow>(id);
  const d = await handle.describe();
  if (d.status.name === 'RUNNING') throw new TroupeError(`pipeline ${id} is still running`, `watch it: npx troupe status ${id}`);
  if (d.status.name === 'COMPLETED') throw new TroupeError(`pipeline ${id} completed`, 'start a new one with `npx troupe pipeline <name>`');
  const history = await handle.fetchHistory();
  const payloads = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads ?? [];
  const input = payloads[0] ? defaultPayloadConverter.fromPayload<unknown>(payloads[0]) : undefined;
  const p = checked(() => parsePipeline(input), `pipeline ${id}`);
  // Temporal closes the children of a closed pipeline (parent-close policy) shortly after it: a stage
  // started again while its old run still runs would be refused, so wait for them a little.
  for (const s of p.stages.filter((x) => !x.export)) {
    const runId = stageRunId(id, s.name);
    for (let waited = 0; await isRunning(c, runId); waited += 250) {
      if (waited >= 15_000)
        throw new TroupeError(`stage ${s.name}: its run ${runId} is still running`, `let it end, or stop it (npx troupe stop ${runId} --now), then resume`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return startPipeline(c, p, id);
}

/** One line per stage, as status and the watcher print them. */
export function pipelineLines(v: PipelineStatusView): string[] {
  return [
    `pipeline ${v.pipelineId} (${v.name}): ${v.status}`,
    ...v.stages.map(
      (s) =>
        `  ${s.name.padEnd(12)} ${s.state.padEnd(9)} ${s.runId}${s.steps !== undefined ? `  ${stepsText(s.steps)}` : ''}${s.eval !== undefined ? `  eval ${s.eval.toFixed(3)}` : ''}${s.export ? `  ${exportText(s.export)}` : ''}${s.after.length ? `  after ${s.after.join(', ')}` : ''}${s.error ? `  ${s.error}` : ''}`,
    ),
  ];
}

/** Waits for the pipeline's result, logging each change of a stage's state. */
export async function watchPipeline(handle: WorkflowHandle<typeof pipelineWorkflow>, log: (line: string) => void): Promise<PipelineSummary> {
  const seen = new Set<string>();
  const progress = new Map<string, string>();
  const client = handle.client;
  let done = false;
  const poll = (async () => {
    while (!done) {
      try {
        const v = await handle.query(pipelineStatusQuery);
        for (const s of v.stages) {
          if (s.state !== 'waiting' && !seen.has(`${s.name}:${s.state}`))
            log(
              `troupe: stage ${s.name} ${s.state}${s.steps !== undefined ? ` after ${stepsText(s.steps)}` : ''}${s.export ? `: ${exportText(s.export)}` : ''} (run ${s.runId})`,
            );
          seen.add(`${s.name}:${s.state}`);
          if (s.state !== 'running' || s.export) continue;
          // a running stage's own progress (its step and eval), one line per change
          const line = await client
            .getHandle(s.runId)
            .query(statusQuery)
            .then((r) => progressLine(r).replace(/ETA \S+/, ''))
            .catch(() => undefined);
          if (line && line !== progress.get(s.name)) log(`troupe: stage ${s.name}: ${line.trim()}`);
          if (line) progress.set(s.name, line);
        }
      } catch {
        /* not started yet, or closed */
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  try {
    return await handle.result();
  } finally {
    done = true;
    await poll;
  }
}

const stepsText = (n: number) => `${n} step${n === 1 ? '' : 's'}`;

/** Watches the pipeline to its end, then prints its stages (and, with json, the summary): exit status 0 when it completed. */
export async function watchToEnd(handle: WorkflowHandle<typeof pipelineWorkflow>, log: (line: string) => void, json: boolean): Promise<number> {
  const printStages = async () => {
    const view = await handle.query(pipelineStatusQuery).catch(() => undefined);
    if (view) for (const l of pipelineLines(view)) console.log(l);
  };
  let summary: PipelineSummary;
  try {
    summary = await watchPipeline(handle, log);
  } catch (e) {
    await printStages();
    // A failed stage (or a terminate): its reason, and the way on, not the SDK's "Workflow execution failed"
    if (e instanceof WorkflowFailedError) {
      const cause = innermostCause(e) as { message?: string };
      throw new TroupeError(
        `pipeline ${handle.workflowId} failed: ${cause.message ?? e.message}`,
        `after fixing the cause: npx troupe resume ${handle.workflowId}`,
      );
    }
    throw e;
  }
  await printStages();
  if (json) console.log(JSON.stringify(summary));
  return 0;
}
