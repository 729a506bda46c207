/**
 * Init-from and fork (run config `init`, `fork`; docs/running.md, "Fork, freeze and init-from"): a model's
 * version 0 is a version another run committed, by reference. The new row names the same checkpoint-store
 * files (no byte is written; `troupe gc` removes a file only when no row names it any more), or, for a
 * version small enough to stay inline in Postgres, copies its columns inside the database. Weights and
 * optimizer state come together: a fork goes on with the optimizer where its parent left it.
 *
 * One rule, three callers: the CLI and the client check a config before starting it, startRun checks it
 * before creating the run (a config typed into the Temporal UI), and initModel stores the version.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { loadTeam } from '../../agents/team-registry';
import type { AnyTeam } from '../../agents/team';
import { initFieldOf, initSourceOf, type InitSource, type RunConfig } from '../../schema/run-config';
import { getRun } from '../store/runs';
import { canonical } from '../../gateway/journal';
import { checkpointOf, engineSpec, type ModelSpec } from '../../agents/model';
import type { ModelSpecInput } from '../../engines/families/model-family';
import { deriveSeed } from '../../agents/seed';

/**
 * A model's InitModel spec. A LoRA model's names its base's version 0 by the seed the base's own
 * InitModel draws it from (over a checkpoint, the engine names the directory), so the spec alone
 * (stored with every version) rebuilds the frozen base.
 */
export function initSpec(spec: ModelSpec, runSeed: number): ModelSpecInput {
  const s = engineSpec(spec);
  // a checkpoint: the directory's vocabulary, which may be padded past the tokenizer's ids (the base's initModel checks they fit)
  if (checkpointOf(spec) !== undefined) return { ...s, vocabSize: 0 };
  if (spec.base === undefined) return s;
  return { ...s, lora: { ...(s.lora as object), baseSeed: deriveSeed(runSeed, 'init', spec.base) } };
}

/** A bad init source; the message starts with the field (`init.policy.step`, `fork.step`, or what the caller named it). */
export class InitSourceError extends TroupeError {
  constructor(
    readonly field: string,
    message: string,
    hint?: string,
  ) {
    super(`${field}: ${message}`, hint);
  }
}

/** The version a source names. */
export interface ResolvedInit {
  run: string;
  model: string;
  version: number;
}

/** The last step of a run whose bookkeeping finished (every update of it returned), or -1. */
export async function lastCommittedStep(sql: Sql, runId: string): Promise<number> {
  const [r] = await sql`SELECT max(step) AS step FROM steps WHERE run_id = ${runId} AND status = 'completed'`;
  return (r?.step as number | null) ?? -1;
}

/** The top-level fields in which two specs differ. */
function differing(a: Record<string, unknown>, b: Record<string, unknown>): string[] {
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => canonical(a[k]) !== canonical(b[k])).sort();
}

export interface InitTarget {
  /** This run's model, its spec and the run seed (a LoRA base is drawn from it). */
  model: string;
  spec: ModelSpec;
  seed: number;
  /** The field named in messages (default `init.<model>`); `stepField` the one for a step (`--at` on the command line). */
  field?: string;
  stepField?: string;
}

/**
 * The version `source` names, checked: the run exists, has the model with the same spec, and the
 * step is committed or the version exists and still has its bytes. Throws InitSourceError naming the field.
 */
export async function resolveInitSource(sql: Sql, source: InitSource, target: InitTarget): Promise<ResolvedInit> {
  const field = target.field ?? `init.${target.model}`;
  const run = await getRun(sql, source.run);
  if (!run) throw new InitSourceError(`${field}.run`, `no run ${source.run} in the store`, 'troupe list shows the runs');
  const model = source.model ?? target.model;
  let team: AnyTeam;
  try {
    team = loadTeam(run.team, (run.config.teamOptions as Record<string, unknown> | undefined) ?? {});
  } catch (e) {
    throw new InitSourceError(`${field}.run`, `run ${source.run}'s team ${run.team} cannot be loaded here: ${(e as Error).message}`);
  }
  const theirs = team.models[model];
  if (!theirs)
    throw new InitSourceError(
      source.model ? `${field}.model` : field,
      `run ${source.run} has no model ${model} (it has: ${Object.keys(team.models).join(', ')})`,
    );
  const ours = initSpec(target.spec, target.seed);
  const other = initSpec(theirs, run.config.seed ?? 0);
  if (canonical(ours) !== canonical(other))
    throw new InitSourceError(
      field,
      `model ${model} of run ${source.run} has another spec than this run's ${target.model} (they differ in: ${differing(ours, other).join(', ')})`,
      'a version starts only a model of the same family, shape and tokenizer',
    );
  let version: number;
  if (source.step !== undefined) {
    const last = await lastCommittedStep(sql, source.run);
    if (source.step > last)
      throw new InitSourceError(
        target.stepField ?? `${field}.step`,
        `step ${source.step} of run ${source.run} is not committed (${last < 0 ? 'it has no committed step yet' : `its last committed step is ${last}`})`,
      );
    const [r] = await sql`SELECT max(version) AS v FROM versions WHERE run_id = ${source.run} AND model = ${model} AND step <= ${source.step}`;
    version = (r?.v as number | null) ?? 0;
  } else {
    version = source.version ?? 0;
  }
  const [row] = await sql`SELECT pruned_at IS NOT NULL AS pruned FROM versions WHERE run_id = ${source.run} AND model = ${model} AND version = ${version}`;
  if (!row) {
    const [n] = await sql`SELECT max(version) AS v FROM versions WHERE run_id = ${source.run} AND model = ${model}`;
    throw new InitSourceError(
      source.version !== undefined ? `${field}.version` : field,
      `run ${source.run} has no version ${version} of ${model} (${n?.v === null || n?.v === undefined ? 'it has none' : `its newest is ${n.v}`})`,
    );
  }
  if (row.pruned)
    throw new InitSourceError(
      field,
      `version ${version} of ${model} in run ${source.run} was pruned by troupe gc; its bytes are gone`,
      'name a version gc kept',
    );
  return { run: source.run, model, version };
}

/** Every init source of a config (its `init`, or every model of a fork), checked against its team. */
export async function checkInitSources(sql: Sql, config: RunConfig, team: AnyTeam, stepField?: string): Promise<Record<string, ResolvedInit>> {
  const out: Record<string, ResolvedInit> = {};
  for (const [model, spec] of Object.entries(team.models)) {
    const source = initSourceOf(config, model);
    if (!source) continue;
    const field = initFieldOf(config, model);
    out[model] = await resolveInitSource(sql, source, {
      model,
      spec,
      seed: config.seed,
      field,
      ...(field === 'fork' ? { stepField: stepField ?? 'fork.step' } : {}),
    });
  }
  return out;
}

/**
 * Stores `from` as version 0 of `model` in `runId`, by reference; a second call is a no-op. One
 * statement: the source row is share-locked while read, so a concurrent gc prune of it either
 * finishes first (then no row is found: refused) or sees the new row name its files (and keeps them).
 */
export async function saveInitialVersionFrom(sql: Sql, runId: string, model: string, from: ResolvedInit, field = `init.${model}`): Promise<void> {
  const rows = await sql`
    INSERT INTO versions (run_id, model, version, step, spec, sha256, metrics, weights, optimizer_state,
                          weights_file, weights_size, optimizer_file, optimizer_size, optimizer_sha256)
    SELECT ${runId}, ${model}, 0, -1, spec, sha256, '{}'::jsonb, weights, optimizer_state,
           weights_file, weights_size, optimizer_file, optimizer_size, optimizer_sha256
    FROM versions WHERE run_id = ${from.run} AND model = ${from.model} AND version = ${from.version} AND pruned_at IS NULL
    FOR SHARE
    ON CONFLICT DO NOTHING RETURNING version`;
  if (rows.length > 0) return;
  const [mine] = await sql`SELECT 1 FROM versions WHERE run_id = ${runId} AND model = ${model} AND version = 0`;
  if (!mine) throw new InitSourceError(field, `version ${from.version} of ${from.model} in run ${from.run} is gone (pruned by troupe gc)`);
}

/** initModel's half: resolves the source again (a retry finds the same version) and stores it; a bad one fails the run, naming the field. */
export async function initFrom(
  sql: Sql,
  input: { runId: string; model: string; seed: number; spec: ModelSpec; init: InitSource; field?: string },
): Promise<void> {
  try {
    const field = input.field ?? `init.${input.model}`;
    const from = await resolveInitSource(sql, input.init, {
      model: input.model,
      spec: input.spec,
      seed: input.seed,
      field,
      ...(field === 'fork' ? { stepField: 'fork.step' } : {}),
    });
    await saveInitialVersionFrom(sql, input.runId, input.model, from, field);
  } catch (e) {
    if (e instanceof InitSourceError) throw ApplicationFailure.nonRetryable(e.message, 'InvalidInit');
    throw e;
  }
}
