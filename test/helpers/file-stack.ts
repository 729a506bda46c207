// A Temporal test server and a fresh database shared by one test file: started in its `before`,
// ended in its `after` (registered here, so the file's own hooks run after these).
import { after, before } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { createTestDatabase, type TestDatabase } from '../../testing/database';
import { startTemporal } from '../../testing/temporal';

export interface FileStack {
  env: TestWorkflowEnvironment;
  db: TestDatabase;
}

/** Read `env` and `db` inside the tests (they exist once `before` ran); nothing starts when `skip` is set. */
export function fileStack(opts: { skip?: unknown } = {}): FileStack {
  const s: Partial<FileStack> = {};
  before(async () => {
    if (opts.skip) return;
    s.env = await startTemporal();
    s.db = await createTestDatabase();
  });
  after(async () => {
    await s.db?.drop();
    await s.env?.teardown();
  });
  return s as FileStack;
}
