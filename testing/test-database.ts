// The PostgreSQL server integration tests use: `npm test` (tools/test.js) resolves it once and
// passes it to the test processes as TROUPE_TEST_DATABASE_URL; testing/database.ts makes
// the fresh per-test databases on it.
//
// Server: TROUPE_TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres if it
// answers, else the embedded PostgreSQL (started under TROUPE_STATE_DIR if needed).
import { loadConfig } from '../infra/config';
import { checkDatabase, connect } from '../infra/db';
import { embeddedPostgresUrl, ensureEmbeddedPostgres, stopEmbeddedPostgres } from '../stack/postgres';

export const LOCAL_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/** Test databases are named `${TEST_DATABASE_PREFIX}<base-36 ms since epoch>_<random hex>`. */
export const TEST_DATABASE_PREFIX = 'troupe_test_';

export interface TestDatabaseServer {
  /** Admin URL (a database we may CREATE DATABASE from). */
  url: string;
  source: 'TROUPE_TEST_DATABASE_URL' | 'local' | 'embedded';
  serverVersion: string;
  /** Set when this call started the embedded server: stops it again. */
  stop?: () => Promise<void>;
}

export async function resolveTestDatabaseServer(opts: { env?: NodeJS.ProcessEnv; log?: (line: string) => void } = {}): Promise<TestDatabaseServer> {
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

/** Drop test databases left behind by crashed runs (older than `maxAgeMs`, default 6 h). */
export async function dropStaleTestDatabases(serverUrl: string, maxAgeMs = 6 * 3600_000): Promise<string[]> {
  const admin = connect(serverUrl, { max: 1 });
  const dropped: string[] = [];
  try {
    const rows = await admin<{ datname: string }[]>`select datname from pg_database where datname like ${TEST_DATABASE_PREFIX + '%'}`;
    for (const { datname } of rows) {
      const born = parseInt(datname.slice(TEST_DATABASE_PREFIX.length).split('_')[0]!, 36);
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
