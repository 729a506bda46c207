/**
 * A Troupe older than the workflow code of runs in its store refuses that store instead of
 * wedging those runs in replay: startRun records the patches its code knows on the run (a
 * resume by newer code adds its own), and the control worker checks them at start.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTrainingControlActivities } from '../../../activities/training/control';
import { runsNeedingNewerCode } from '../../../activities/store/runs';
import { TroupeError } from '../../../infra/errors';
import { refuseNewerRuns } from '../../../processes/workflow-compat';
import { parseRunConfig } from '../../../schema/run-config';
import { Patch } from '../../../workflows/patches';
import { createTestDatabase, type TestDatabase } from '../../helpers';

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db?.drop();
});

const today = Object.values(Patch);
const start = (patches: readonly string[], runId: string, executionId: string, resume = false) =>
  createTrainingControlActivities({ sql: db.sql, workflowPatches: patches }).startRun({
    runId,
    config: parseRunConfig({ team: 'math', runId, steps: 2 }),
    workflowId: runId,
    executionId,
    models: ['policy'],
    ...(resume ? { resume } : {}),
  });
const patchesOf = async (runId: string) => (await db.sql`SELECT workflow_patches FROM runs WHERE run_id = ${runId}`)[0]!.workflow_patches as string[];

test("startRun records its code's patches; a resume by newer code adds the new ones; an older Troupe is refused naming them", async () => {
  await start(today, 'old-run', 'e1');
  await start(today, 'new-run', 'e2');
  assert.deepEqual(await patchesOf('old-run'), [...today].sort());
  assert.deepEqual(await runsNeedingNewerCode(db.sql, today), []);
  await refuseNewerRuns(db.sql, today); // the same code: accepted

  // A newer Troupe resumes new-run: its history may now hold markers of patches older code lacks.
  await db.sql`UPDATE runs SET status = 'failed' WHERE run_id = 'new-run'`;
  await start([...today, 'zz-newer-patch'], 'new-run', 'e3', true);
  assert.deepEqual(await patchesOf('new-run'), [...today, 'zz-newer-patch'].sort());
  assert.deepEqual(await runsNeedingNewerCode(db.sql, today), [{ runId: 'new-run', status: 'running', unknown: ['zz-newer-patch'] }]);

  const before = await db.sql`SELECT run_id, status, config, workflow_patches FROM runs ORDER BY run_id`;
  await assert.rejects(
    refuseNewerRuns(db.sql, today),
    (e: unknown) =>
      e instanceof TroupeError &&
      /^this Troupe \(\S+ at .+\) is older than the workflow code of runs in its store: new-run \(running: zz-newer-patch\)\. It cannot replay them$/.test(
        e.message,
      ) &&
      /npm install troupe@latest/.test(e.hint ?? ''),
  );
  // An older Troupe that knows fewer patches sees both runs, each with what it lacks.
  const older = today.filter((p) => p !== Patch.decideAtStart);
  assert.deepEqual((await runsNeedingNewerCode(db.sql, older)).map((r) => `${r.runId}: ${r.unknown.join(',')}`).sort(), [
    'new-run: decide-at-start,zz-newer-patch',
    'old-run: decide-at-start',
  ]);
  assert.deepEqual(await db.sql`SELECT run_id, status, config, workflow_patches FROM runs ORDER BY run_id`, before, 'nothing stored is touched');
});
