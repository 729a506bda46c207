// Versioned SQL migrations: schema/migrations/NNN_name.sql, applied in order.
//
//   import { migrate } from './migrate';
//   const { from, to, applied } = await migrate(sql);
//
// - Adding a migration = adding a file `NNN_what.sql` (next free number). No code change.
// - Each migration runs in its own transaction together with its `schema_version` row,
//   so a failing migration leaves nothing behind.
// - A transaction-scoped advisory lock serialises concurrent callers (many workers
//   starting at once): the second waits, then finds nothing left to do.
// - A database whose version is newer than the newest migration this code has is
//   refused (old code must not write to a newer schema).
// - Applied migrations are never re-run. Editing one after it was applied is reported
//   (checksum mismatch) through `log`, not applied again: add a new migration instead.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Sql } from '../infra/db';
import { TroupeError } from '../infra/errors';

export const MIGRATIONS_DIR = path.join(__dirname, 'migrations');

/** Any constant works; this one is "troupe" in ASCII. Shared by every Troupe process. */
export const MIGRATION_LOCK_KEY = 0x74726f757065;

export interface Migration {
  version: number;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

const FILE_RE = /^(\d{3,})_([a-z0-9_]+)\.sql$/;

/** Read and validate the migration files of `dir` (sorted by version). */
export function loadMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.sql')) : [];
  const migrations: Migration[] = [];
  const seen = new Map<number, string>();
  for (const file of files) {
    const m = FILE_RE.exec(file);
    if (!m) {
      throw new TroupeError(`migration file ${file} is misnamed`, 'name migrations NNN_lower_snake_name.sql, e.g. 002_trajectories.sql');
    }
    const version = Number(m[1]);
    if (version < 1) throw new TroupeError(`migration ${file}: versions start at 001`, 'renumber it');
    const other = seen.get(version);
    if (other) {
      throw new TroupeError(`two migrations have version ${version}: ${other} and ${file}`, 'give one of them the next free number');
    }
    seen.set(version, file);
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    migrations.push({
      version,
      name: m[2]!,
      file,
      sql: text,
      checksum: createHash('sha256').update(text).digest('hex'),
    });
  }
  return migrations.sort((a, b) => a.version - b.version);
}

export interface MigrateResult {
  /** Version before (0 for an empty database). */
  from: number;
  /** Version after. */
  to: number;
  /** Files applied by this call, in order. */
  applied: string[];
}

interface VersionRow {
  version: number;
  checksum: string | null;
}

/** The database's schema version (0 when it has no schema_version table). */
export async function schemaVersion(sql: Sql): Promise<number> {
  const { exists } = (await sql<{ exists: boolean }[]>`select to_regclass('schema_version') is not null as exists`)[0]!;
  if (!exists) return 0;
  const { v } = (await sql<{ v: number | null }[]>`select max(version)::int as v from schema_version`)[0]!;
  return v ?? 0;
}

/** Apply every pending migration. Idempotent and safe to call from many processes at once. */
export async function migrate(sql: Sql, opts: { dir?: string; log?: (line: string) => void } = {}): Promise<MigrateResult> {
  const migrations = loadMigrations(opts.dir);
  const newest = migrations.length ? migrations[migrations.length - 1]!.version : 0;
  const applied: string[] = [];
  let from: number | undefined;
  for (;;) {
    // One transaction per migration; each takes the lock and re-reads the state.
    const step = await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_KEY}::bigint)`;
      await tx`
        create table if not exists schema_version (
          version    integer primary key,
          name       text not null,
          checksum   text,
          applied_at timestamptz not null default now()
        )`;
      const rows = await tx<VersionRow[]>`select version, checksum from schema_version order by version`;
      const current = rows.length ? rows[rows.length - 1]!.version : 0;
      if (from === undefined) {
        from = current;
        for (const row of rows) {
          const m = migrations.find((x) => x.version === row.version);
          if (m && row.checksum && row.checksum !== m.checksum) {
            opts.log?.(`troupe: warning: migration ${m.file} changed after it was applied; add a new migration instead`);
          }
        }
      }
      if (current > newest) {
        throw new TroupeError(
          `the database schema is at version ${current}, newer than this code knows (newest migration: ${newest})`,
          'update Troupe (git pull && npm ci), or point DATABASE_URL at another database',
        );
      }
      const done = new Set(rows.map((r) => r.version));
      const next = migrations.find((m) => !done.has(m.version));
      if (!next) return { current, file: undefined as string | undefined };
      await tx.unsafe(next.sql).simple();
      await tx`insert into schema_version (version, name, checksum) values (${next.version}, ${next.name}, ${next.checksum})`;
      return { current: next.version, file: next.file };
    });
    if (!step.file) return { from: from ?? 0, to: step.current, applied };
    applied.push(step.file);
    opts.log?.(`troupe: applied migration ${step.file}`);
  }
}
