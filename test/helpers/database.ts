// The PostgreSQL server integration tests use, and fresh per-test databases on it.
//
// Server: TROUPE_TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres if it
// answers, else the embedded PostgreSQL (started under TROUPE_STATE_DIR if needed).
// `npm test` resolves it once and passes it to the test processes as TROUPE_TEST_DATABASE_URL.
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { checkpointStoreOf, type CheckpointStore } from '../../infra/checkpoint-store';
import { loadConfig, redactUrl } from '../../infra/config';
import { Sql, checkDatabase, connect, withDatabase } from '../../infra/db';
import { embeddedPostgresUrl, ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../../infra/postgres';
import { migrate } from '../../schema/migrate';

export const LOCAL_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabaseServer {
  /** Admin URL (a database we may CREATE DATABASE from). */
  url: string;
  source: 'TROUPE_TEST_DATABASE_URL' | 'local' | 'embedded';
  serverVersion: string;
  /** Set when this call started the embedded server: stops it again. */
  stop?: () => Promise<void>;
}

export async function resolveTestDatabaseServer(
  opts: { env?: NodeJS.ProcessEnv; log?: (line: string) => void } = {},
): Promise<TestDatabaseServer> {
  const env = opts.env ?? process.env;
  const log = opts.log ?? ((l: string) => process.stderr.write(l + '\n'));
  const explicit = env.TROUPE_TEST_DATABASE_URL?.trim();
  if (explicit) {
    const { serverVersion } = await checkDatabase(explicit);
    return { url: explicit, source: 'TROUPE_TEST_DATABASE_URL', serverVersion };
  }
  try {
    const { serverVersion } = await checkDatabase(LOCAL_POSTGRES_URL, { connectTimeout: 2 });
    return { url: LOCAL_POSTGRES_URL, source: 'local', serverVersion };
  } catch {
    /* fall through to the embedded server */
  }
  const config = loadConfig(env);
  const pg = await ensureEmbeddedPostgres({ stateDir: config.stateDir, port: config.postgresPort, log, record: false });
  const url = embeddedPostgresUrl(pg.port, 'postgres');
  const { serverVersion } = await checkDatabase(url);
  return {
    url,
    source: 'embedded',
    serverVersion,
    stop: pg.started ? async () => void (await stopEmbeddedPostgres(config.stateDir)) : undefined,
  };
}

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

const PREFIX = 'troupe_test_';

/** A fresh, uniquely named database on the test server, migrated unless `migrate: false`. */
export async function createTestDatabase(opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const server = await testDatabaseServer();
  const name = `${PREFIX}${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
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

/** Drop test databases left behind by crashed runs (older than `maxAgeMs`, default 6 h). */
export async function dropStaleTestDatabases(serverUrl: string, maxAgeMs = 6 * 3600_000): Promise<string[]> {
  const admin = connect(serverUrl, { max: 1 });
  const dropped: string[] = [];
  try {
    const rows = await admin<{ datname: string }[]>`select datname from pg_database where datname like ${PREFIX + '%'}`;
    for (const { datname } of rows) {
      const born = parseInt(datname.slice(PREFIX.length).split('_')[0], 36);
      if (Number.isFinite(born) && Date.now() - born > maxAgeMs) {
        await admin.unsafe(`drop database if exists "${datname}" with (force)`);
        dropped.push(datname);
      }
    }
  } finally {
    await admin.end({ timeout: 1 });
  }
  return dropped;
}

export { redactUrl };
