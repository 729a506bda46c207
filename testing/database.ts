// Fresh per-test databases on the test PostgreSQL server (testing/test-database.ts picks the server).
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkpointStoreOf, type CheckpointStore } from '../infra/checkpoint-store';
import { loadConfig } from '../infra/config';
import { type Sql, connect, withDatabase } from '../infra/db';
import { resolveTestDatabaseServer, TEST_DATABASE_PREFIX, type TestDatabaseServer } from './test-database';
import { migrate } from '../schema/migrate';

export { dropStaleTestDatabases, resolveTestDatabaseServer, type TestDatabaseServer } from './test-database';

let serverPromise: Promise<TestDatabaseServer> | undefined;

/** The test server for this process (resolved once). */
export function testDatabaseServer(): Promise<TestDatabaseServer> {
  serverPromise ??= resolveTestDatabaseServer();
  return serverPromise;
}

export interface TestDatabase {
  name: string;
  url: string;
  sql: Sql;
  /**
   * A checkpoint store of its own (a temp folder, removed by drop), with the
   * configured inline limit: TROUPE_CHECKPOINT_INLINE_MAX_BYTES=0 runs a test with every version in files.
   */
  checkpoints: CheckpointStore;
  /** Close `sql`, drop the database and the checkpoint folder. */
  drop(): Promise<void>;
}

/** A fresh, uniquely named database on the test server, migrated unless `migrate: false`. */
export async function createTestDatabase(opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const server = await testDatabaseServer();
  const name = `${TEST_DATABASE_PREFIX}${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  const admin = connect(server.url, { max: 1 });
  try {
    await admin.unsafe(`create database "${name}"`);
  } finally {
    await admin.end({ timeout: 1 });
  }
  const url = withDatabase(server.url, name);
  const sql = connect(url);
  if (opts.migrate !== false) await migrate(sql);
  const checkpointDir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-ckpt-`));
  return {
    name,
    url,
    sql,
    checkpoints: checkpointStoreOf({ ...loadConfig(), checkpointDir }),
    async drop() {
      fs.rmSync(checkpointDir, { recursive: true, force: true });
      await sql.end({ timeout: 1 }).catch(() => undefined);
      const a = connect(server.url, { max: 1 });
      try {
        await a.unsafe(`drop database if exists "${name}" with (force)`);
      } finally {
        await a.end({ timeout: 1 });
      }
    },
  };
}
