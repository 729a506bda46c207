/**
 * Forks (`troupe fork`, the client's forkRun): a new run whose config is a stored run's, with the
 * caller's changes and `fork: { run, step }`, checked against the store before it starts.
 */
import { getRun } from '../activities/store/runs';
import { checkInitSources, lastCommittedStep } from '../activities/training/init-from';
import { checkSftSource } from '../activities/training/sft';
import { loadTeam } from '../agents/team-registry';
import type { Sql } from '../infra/db';
import { TroupeError } from '../infra/errors';
import type { RunConfig, RunConfigInput } from '../schema/run-config';

/**
 * The config a fork of `parent` at step `at` starts from: the parent's stored config (its team,
 * options and settings) without its run id or its own init/fork, and `fork`. `atField` names the
 * step in messages (`--at`, `at`).
 */
export async function forkBase(sql: Sql, parent: string, at: number, atField = '--at'): Promise<RunConfigInput> {
  const run = await getRun(sql, parent);
  if (!run) throw new TroupeError(`fork: no run ${parent} in the store`, 'troupe list shows the runs');
  if (!Number.isInteger(at) || at < 0) throw new TroupeError(`${atField}: must be a step number >= 0 (got ${at})`);
  const last = await lastCommittedStep(sql, parent);
  if (at > last)
    throw new TroupeError(
      `${atField}: step ${at} of run ${parent} is not committed (${last < 0 ? 'it has no committed step yet' : `its last committed step is ${last}`})`,
      last < 0 ? undefined : `fork it at a step from 0 to ${last}`,
    );
  const { runId: _r, init: _i, fork: _f, ...rest } = run.config;
  return { ...rest, team: run.team, fork: { run: parent, step: at } };
}

/** A config's init, fork and sft sources, checked against the store (InitSourceError, a TroupeError naming the field). */
export async function checkInitSourcesOf(sql: Sql, config: RunConfig, stepField?: string): Promise<void> {
  if (!config.init && !config.fork && !config.sft) return;
  const team = loadTeam(config.team, config.teamOptions);
  await checkInitSources(sql, config, team, stepField);
  await checkSftSource(sql, config, team);
}
