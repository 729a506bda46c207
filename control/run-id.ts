/**
 * Run ids: the default id of a new run (`<team>-<time>-<random>`), and refusing a new start
 * under an id that a stored run or a running workflow already has.
 */
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { getRun } from '../activities/store/runs';
import { TroupeError } from '../infra/errors';
import type { RunConfig } from '../schema/run-config';
import { startTrainingRun, type Connected } from './runs';

export function runIdFor(team: string, now = new Date()): string {
  const t = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return `${team}-${t}-${Math.random().toString(36).slice(2, 6)}`;
}

/**
 * Starts a new run, refusing (before anything is said to have started) an id that a stored run
 * or a running workflow already has: a new start never continues or changes an existing run.
 */
export async function startNewRun(c: Connected, config: RunConfig) {
  const runId = config.runId!;
  const existing = await getRun(c.sql, runId);
  if (existing) {
    const hint =
      existing.status === 'failed'
        ? `pick a new --run-id, or continue this one with \`npx troupe resume ${runId}\``
        : existing.status === 'completed' || existing.status === 'stopped'
          ? 'pick a new --run-id (or leave it out for a fresh one)'
          : `pick a new --run-id; watch this one with \`npx troupe status ${runId} --watch\``;
    throw new TroupeError(`run ${runId} already exists (${existing.status}, team ${existing.team}); a new start never continues or changes it`, hint);
  }
  try {
    return await startTrainingRun(c.client, c.config.taskQueue, config);
  } catch (e) {
    if (e instanceof WorkflowExecutionAlreadyStartedError)
      throw new TroupeError(`a workflow ${runId} is already running`, `pick a new --run-id; watch it with \`npx troupe status ${runId} --watch\``);
    throw e;
  }
}
