/**
 * A pipeline: a DAG of stages, run by one `pipeline` workflow (workflows/pipeline.ts). A run
 * stage is one training run, a child workflow: RL, SFT where its run config says `sft`, or an
 * eval where it says `steps: 0` (the initial models, from `init`, evaluated). An export stage
 * writes a model version of an earlier stage's run in the Hugging Face layout (one activity,
 * as `troupe export-model`), to a directory it fills once. A stage
 * starts when the stages it comes `after` have ended; by default that is the stage before
 * it, so a plain list is a chain. A stage's run config may name an earlier stage's run by
 * reference, resolved when the stage starts:
 *
 *   { "$run": "teacher" }    the run id of stage teacher
 *   { "$step": "teacher" }   its last committed step (steps count from 0), for init: { <model>: { run, step } }
 *
 * A stage's run id is `<pipeline id>.<stage>`, so a pipeline started again under its id
 * (troupe resume) finds what each stage already did: a finished stage is never rerun, an
 * unfinished one resumes at its last committed step.
 *
 * Workflow-safe: pure data and checks, no Node APIs. Each problem is named by its field.
 */
import { FieldError, IssueList, describe } from '../infra/issues';
import type { RunConfigInput } from './run-config';

export interface PipelineStageInput {
  name: string;
  /** A run stage's run config (team, steps, ... as `troupe train --config` takes), with stage references. */
  run?: Record<string, unknown>;
  /** An export stage instead: which run's model version goes to which directory. */
  export?: PipelineExportInput;
  /** Stages that end before this one starts; default: the stage before it (none for the first). */
  after?: string[];
}

export interface PipelineInput {
  /** The pipeline's name (troupe.config.ts `pipelines` key, or the file's), shown in status. */
  name: string;
  stages: PipelineStageInput[];
}

/** An export stage: `run` (a run id or `{ "$run": stage }`), its `model`, `version` (default: its last) to `out`. */
export interface PipelineExportInput {
  run: unknown;
  model: string;
  version?: number;
  out: string;
}

export interface PipelineStage {
  name: string;
  /** Exactly one of run and export. */
  run?: Record<string, unknown>;
  export?: PipelineExportInput;
  after: string[];
}

/** An export stage's input with its reference resolved. */
export interface StageExport {
  runId: string;
  model: string;
  version?: number;
  out: string;
}

export interface Pipeline {
  name: string;
  stages: PipelineStage[];
}

export class PipelineError extends FieldError {
  constructor(issues: ConstructorParameters<typeof FieldError>[0]) {
    super(issues, 'invalid pipeline');
    this.name = 'PipelineError';
  }
}

/** Names short enough that a stage's run id (`<pipeline id>.<stage>`, ids up to 60) stays a run id (up to 100). */
const STAGE_NAME = /^[a-z][a-z0-9-]{0,19}$/;
const PIPELINE_NAME = /^[a-z][a-z0-9-]{0,29}$/;
/** A pipeline id: as a run id, up to 60 characters (the default, `<name>-<time>-<random>`, is at most 51). */
export const PIPELINE_ID = /^[A-Za-z0-9._-]{1,60}$/;
const REF_KEYS = ['$run', '$step'] as const;
type RefKey = (typeof REF_KEYS)[number];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `{ "$run": "x" }` or `{ "$step": "x" }`: the key and the stage it names, else undefined. */
function refOf(v: unknown): { key: RefKey; stage: unknown } | undefined {
  if (!isObject(v)) return undefined;
  const keys = Object.keys(v);
  const key = REF_KEYS.find((k) => keys.includes(k));
  return key ? { key, stage: v[key] } : undefined;
}

/** Every stage reference in `value`, with its path under `at`. */
function refsIn(value: unknown, at: string, out: Array<{ path: string; key: RefKey; stage: unknown; extra: string[] }> = []) {
  const ref = refOf(value);
  if (ref) out.push({ path: at, ...ref, extra: Object.keys(value as object).filter((k) => k !== ref.key) });
  else if (Array.isArray(value)) value.forEach((v, i) => refsIn(v, `${at}[${i}]`, out));
  else if (isObject(value)) for (const [k, v] of Object.entries(value)) refsIn(v, `${at}.${k}`, out);
  return out;
}

/** The pipeline checked: names, `after` (earlier stages only, so it is acyclic), references (to stages it waits for). */
export function parsePipeline(input: unknown): Pipeline {
  const issues = new IssueList(20, (list) => new PipelineError(list));
  if (!isObject(input)) {
    issues.add('(pipeline)', `must be an object { name, stages: [...] }, got ${describe(input)}`);
    issues.throwIfAny();
  }
  const p = input as Record<string, unknown>;
  for (const k of Object.keys(p)) if (k !== 'name' && k !== 'stages') issues.add(k, 'unknown field (known: name, stages)');
  if (typeof p.name !== 'string' || !PIPELINE_NAME.test(p.name))
    issues.add('name', `must be up to 30 lower-case letters, digits and -, starting with a letter (got ${describe(p.name)})`);
  if (!Array.isArray(p.stages) || p.stages.length === 0) {
    issues.add('stages', `must be a non-empty array of { name, run, after? }, got ${describe(p.stages)}`);
    issues.throwIfAny();
  }
  const stages: PipelineStage[] = [];
  const seen = new Set<string>();
  (p.stages as unknown[]).forEach((raw, i) => {
    const at = `stages[${i}]`;
    if (!isObject(raw)) return issues.add(at, `must be an object { name, run, after? }, got ${describe(raw)}`);
    for (const k of Object.keys(raw))
      if (!['name', 'run', 'export', 'after'].includes(k)) issues.add(`${at}.${k}`, 'unknown field (known: name, run, export, after)');
    const name = raw.name;
    if (typeof name !== 'string' || !STAGE_NAME.test(name))
      issues.add(`${at}.name`, `must be up to 20 lower-case letters, digits and -, starting with a letter (got ${describe(name)})`);
    else if (seen.has(name)) issues.add(`${at}.name`, `"${name}" names two stages`);
    if (raw.run !== undefined && raw.export !== undefined) issues.add(at, 'a stage has run or export, not both');
    else if (raw.export !== undefined) checkExport(raw.export, `${at}.export`, issues);
    else if (!isObject(raw.run)) issues.add(`${at}.run`, `must be a run config object ({ "team": ..., "steps": ... }), got ${describe(raw.run)}`);
    else if (raw.run.runId !== undefined) issues.add(`${at}.run.runId`, "a stage's run id is <pipeline id>.<stage>: leave runId out");
    const prev = i > 0 ? (p.stages as Array<{ name?: unknown }>)[i - 1]?.name : undefined;
    let after: string[] = typeof prev === 'string' ? [prev] : [];
    if (raw.after !== undefined) {
      if (!Array.isArray(raw.after) || raw.after.some((a) => typeof a !== 'string'))
        issues.add(`${at}.after`, `must be an array of stage names, got ${describe(raw.after)}`);
      else {
        after = raw.after as string[];
        for (const a of after) if (!seen.has(a)) issues.add(`${at}.after`, `"${a}" is not a stage before this one (stages run after earlier stages only)`);
      }
    }
    const waitsFor = upstream(stages, after);
    const body = isObject(raw.export) ? { key: 'export', value: raw.export } : { key: 'run', value: raw.run };
    if (isObject(body.value))
      for (const r of refsIn(body.value, `${at}.${body.key}`)) {
        if (r.extra.length > 0) issues.add(r.path, `a reference is { "${r.key}": "<stage>" } alone, not with ${r.extra.join(', ')}`);
        else if (typeof r.stage !== 'string') issues.add(r.path, `${r.key} must name a stage, got ${describe(r.stage)}`);
        else if (!waitsFor.has(r.stage))
          issues.add(r.path, `${r.key} names "${r.stage}", which this stage does not wait for (it runs after: ${[...waitsFor].join(', ') || 'nothing'})`);
      }
    if (typeof name === 'string') seen.add(name);
    stages.push(
      isObject(raw.export)
        ? { name: String(name), export: raw.export as unknown as PipelineExportInput, after }
        : { name: String(name), run: isObject(raw.run) ? raw.run : {}, after },
    );
  });
  issues.throwIfAny();
  return { name: p.name as string, stages };
}

/** An export stage's fields: run (an id or a reference), model, out, version (an integer >= 0) if given. */
function checkExport(e: unknown, at: string, issues: IssueList): void {
  if (!isObject(e)) return issues.add(at, `must be an object { run, model, out, version? }, got ${describe(e)}`);
  for (const k of Object.keys(e))
    if (!['run', 'model', 'version', 'out'].includes(k)) issues.add(`${at}.${k}`, 'unknown field (known: run, model, version, out)');
  if (!(typeof e.run === 'string' && e.run.length > 0) && refOf(e.run)?.key !== '$run')
    issues.add(`${at}.run`, `must be a run id or { "$run": "<stage>" }, got ${refOf(e.run) ? JSON.stringify(e.run) : describe(e.run)}`);
  if (typeof e.model !== 'string' || e.model.length === 0) issues.add(`${at}.model`, `must name a model of the run, got ${describe(e.model)}`);
  if (typeof e.out !== 'string' || e.out.length === 0) issues.add(`${at}.out`, `must be a directory path, got ${describe(e.out)}`);
  if (e.version !== undefined && !(Number.isInteger(e.version) && (e.version as number) >= 0))
    issues.add(`${at}.version`, `must be an integer >= 0 (default: the run's last version), got ${describe(e.version)}`);
}

/** The stages `after` names and everything they wait for in turn. */
function upstream(stages: readonly PipelineStage[], after: readonly string[]): Set<string> {
  const out = new Set<string>();
  const visit = (n: string) => {
    if (out.has(n)) return;
    out.add(n);
    for (const a of stages.find((s) => s.name === n)?.after ?? []) visit(a);
  };
  after.forEach(visit);
  return out;
}

/** The run id of a stage of pipeline `pipelineId`. */
export const stageRunId = (pipelineId: string, stage: string) => `${pipelineId}.${stage}`;

/** What an ended stage gives the stages after it. */
export interface StageOutcome {
  runId: string;
  /** Its last committed step (steps count from 0; -1: none), what `{ "$step": ... }` gives. */
  step: number;
}

/** `value` with its stage references resolved from the stages that ended. */
function resolveRefs(stage: PipelineStage, value: unknown, ended: Readonly<Record<string, StageOutcome>>): unknown {
  const resolve = (v: unknown): unknown => {
    const ref = refOf(v);
    if (ref) {
      const done = ended[ref.stage as string];
      if (!done) throw new PipelineError([{ path: stage.name, message: `stage "${String(ref.stage)}" has not ended` }]);
      return ref.key === '$run' ? done.runId : done.step;
    }
    if (Array.isArray(v)) return v.map(resolve);
    if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, resolve(x)]));
    return v;
  };
  return resolve(value);
}

/** A run stage's run config with its references resolved and its run id set. */
export function stageRunConfig(pipelineId: string, stage: PipelineStage, ended: Readonly<Record<string, StageOutcome>>): RunConfigInput {
  return { ...(resolveRefs(stage, stage.run ?? {}, ended) as RunConfigInput), runId: stageRunId(pipelineId, stage.name) };
}

/** An export stage's input with its reference resolved. */
export function stageExport(stage: PipelineStage, ended: Readonly<Record<string, StageOutcome>>): StageExport {
  const { run, ...rest } = resolveRefs(stage, stage.export, ended) as PipelineExportInput & { run: string };
  return { runId: run, ...rest };
}

/** Stages whose `after` have all ended and that have not started. */
export function readyStages(p: Pipeline, ended: ReadonlySet<string>, started: ReadonlySet<string>): PipelineStage[] {
  return p.stages.filter((s) => !started.has(s.name) && s.after.every((a) => ended.has(a)));
}
