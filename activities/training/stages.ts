// What a pipeline (workflows/pipeline.ts) asks the store about one of its stages' runs before it
// starts the stage: whether the run exists, how it ended, and its last committed step. A stage
// whose run completed or stopped is not run again; any other stored run is resumed.
import type { Sql } from '../../infra/db';
import { getRun, type RunStatus } from '../store/runs';
import { lastCommittedStep } from './init-from';

export interface StageRunState {
  /** The run's stored status; null when no run has that id yet. */
  status: RunStatus | null;
  /** Its last committed step (-1: none). */
  step: number;
}

export function createStageActivities(deps: { sql: Sql }) {
  return {
    async stageRunState({ runId }: { runId: string }): Promise<StageRunState> {
      const run = await getRun(deps.sql, runId);
      return { status: run?.status ?? null, step: run ? await lastCommittedStep(deps.sql, runId) : -1 };
    },
  };
}

export type StageActivities = ReturnType<typeof createStageActivities>;
