// What a pipeline (workflows/pipeline.ts) asks of the control worker for its stages: whether a
// stage's run exists, how it ended and its last committed step (a run that completed or stopped
// is not run again; any other stored run is resumed), and an export stage's files.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import type { Sql } from '../../infra/db';
import { isTroupeError } from '../../infra/errors';
import type { StageExport } from '../../schema/pipeline';
import { exportModelVersion } from '../store/model-export';
import { getRun, type RunStatus } from '../store/runs';
import { latestVersions } from '../store/versions';
import { lastCommittedStep } from './init-from';

export interface StageRunState {
  /** The run's stored status; null when no run has that id yet. */
  status: RunStatus | null;
  /** Its last committed step (-1: none). */
  step: number;
}

export interface ExportedStage {
  runId: string;
  model: string;
  version: number;
  /** The directory, absolute. */
  out: string;
  /** The directory already held this version (an earlier attempt or execution wrote it). */
  kept: boolean;
}

/** Written last into an export stage's directory: what it holds, so a stage run again knows it is done. */
export const EXPORT_MARKER = 'troupe-export.json';

export function createStageActivities(deps: { sql: Sql; checkpoints?: CheckpointStore; python?: () => string }) {
  return {
    async stageRunState({ runId }: { runId: string }): Promise<StageRunState> {
      const run = await getRun(deps.sql, runId);
      return { status: run?.status ?? null, step: run ? await lastCommittedStep(deps.sql, runId) : -1 };
    },

    /**
     * Writes the version into a sibling directory, then renames it to `out`: `out` appears whole or
     * not at all. A directory that already holds the same version (its marker says so) is kept.
     */
    async exportStage(a: StageExport & { stage: string }): Promise<ExportedStage> {
      const refuse = (message: string) => ApplicationFailure.nonRetryable(`stage ${a.stage}: ${message}`, 'InvalidExportStage');
      if (!deps.checkpoints) throw refuse('this control worker has no checkpoint store to read versions from');
      const out = path.resolve(a.out);
      const version = a.version ?? (await latestVersions(deps.sql, a.runId))[a.model]?.version;
      if (version === undefined) throw refuse(`export.model: run ${a.runId} has no versions of model ${a.model}`);
      const want = { runId: a.runId, model: a.model, version };
      const marker = path.join(out, EXPORT_MARKER);
      if (fs.existsSync(marker)) {
        const held = JSON.parse(fs.readFileSync(marker, 'utf8')) as typeof want;
        if (held.runId === want.runId && held.model === want.model && held.version === want.version) return { ...want, out, kept: true };
        throw refuse(`export.out: ${out} holds run ${held.runId} model ${held.model} version ${held.version}; name another directory`);
      }
      if (fs.existsSync(out) && fs.readdirSync(out).length > 0) throw refuse(`export.out: ${out} is not empty; name a new or empty directory`);
      const partial = `${out}.troupe-partial`;
      fs.rmSync(partial, { recursive: true, force: true }); // what an attempt that crashed left
      fs.mkdirSync(path.dirname(out), { recursive: true });
      try {
        const r = await exportModelVersion(deps.sql, deps.checkpoints, { ...want, out: partial, python: deps.python });
        fs.writeFileSync(path.join(partial, EXPORT_MARKER), JSON.stringify({ ...want, files: r.files }) + '\n');
        if (fs.existsSync(out)) fs.rmdirSync(out); // empty (checked above): rmdir refuses anything else
        fs.renameSync(partial, out);
        return { ...want, out, kept: false };
      } catch (e) {
        fs.rmSync(partial, { recursive: true, force: true });
        if (isTroupeError(e)) throw refuse(e.message);
        throw e;
      }
    },
  };
}

export type StageActivities = ReturnType<typeof createStageActivities>;
