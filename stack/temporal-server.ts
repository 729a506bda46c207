// The real Temporal server on PostgreSQL (the production path; `troupe up` runs the CLI's dev
// server instead). Built from its Go module like the CLI (goInstall in stack/temporal.ts):
// `temporal-server` and `temporal-sql-tool` in <cache>/bin, one build per machine.
//
//   const { server, sqlTool } = await ensureTemporalServerBinaries();
//   await setupTemporalSchema(sqlTool, { host, port, user, database: 'temporal', visibilityDatabase: 'temporal_visibility' });
//   spawn(server, temporalServerArgs(DEPLOY_TEMPORAL_CONFIG_DIR), { env: { TEMPORAL_SERVER_DB: 'temporal', ... } });
//
// The server's configuration is deploy/temporal/production.yaml, a template the server renders
// from TEMPORAL_SERVER_* variables; docs/operations.md walks through it.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TroupeError } from '../infra/errors';
import { cacheBinDir } from '../infra/paths';
import { repoRoot } from '../infra/paths';
import { goInstall, type GoBuild, type Log } from './temporal';

export const TEMPORAL_SERVER_MODULE = 'go.temporal.io/server';
export const TEMPORAL_SERVER_VERSION = 'v1.29.1';

export const TEMPORAL_SERVER_BUILD: GoBuild = {
  what: `the Temporal server ${TEMPORAL_SERVER_VERSION} and its SQL schema tool`,
  specs: [`${TEMPORAL_SERVER_MODULE}/cmd/server@${TEMPORAL_SERVER_VERSION}`, `${TEMPORAL_SERVER_MODULE}/cmd/tools/sql@${TEMPORAL_SERVER_VERSION}`],
  binaries: { server: 'temporal-server', sql: 'temporal-sql-tool' },
  name: 'temporal-server',
};

/** The folder holding production.yaml, the server config template. */
export const DEPLOY_TEMPORAL_CONFIG_DIR = path.join(repoRoot, 'deploy', 'temporal');

/** `temporal-server` and `temporal-sql-tool` from <cache>/bin, built there first if missing. */
export async function ensureTemporalServerBinaries(opts: { env?: NodeJS.ProcessEnv; log?: Log } = {}): Promise<{ server: string; sqlTool: string }> {
  const [server, sqlTool] = await goInstall(TEMPORAL_SERVER_BUILD, opts);
  return { server: server!, sqlTool: sqlTool! };
}

/** True when both binaries are already in <cache>/bin (no build needed). */
export function temporalServerBinariesCached(env: NodeJS.ProcessEnv = process.env): boolean {
  return Object.values(TEMPORAL_SERVER_BUILD.binaries).every((b) => fs.existsSync(path.join(cacheBinDir(env), b)));
}

/** Arguments of `temporal-server` to start every service from `<configDir>/production.yaml`. */
export function temporalServerArgs(configDir: string = DEPLOY_TEMPORAL_CONFIG_DIR): string[] {
  return ['--root', '/', '--config', path.resolve(configDir), '--env', 'production', '--allow-no-auth', 'start'];
}

export interface SchemaTarget {
  host: string;
  port: number;
  user: string;
  password?: string;
  /** Temporal's main database and its visibility database. */
  database: string;
  visibilityDatabase: string;
}

/** The schema tool's commands that create both databases and bring their schemas to this server version. */
export function schemaCommands(t: SchemaTarget): string[][] {
  const base = (db: string) => [
    '--plugin',
    'postgres12',
    '--endpoint',
    t.host,
    '--port',
    String(t.port),
    '--user',
    t.user,
    ...(t.password ? ['--password', t.password] : []),
    '--database',
    db,
  ];
  return [
    [t.database, 'postgresql/v12/temporal'],
    [t.visibilityDatabase, 'postgresql/v12/visibility'],
  ].flatMap(([db, schema]) => [
    [...base(db!), 'create-database'],
    [...base(db!), 'setup-schema', '-v', '0.0'],
    [...base(db!), 'update-schema', '--schema-name', schema!],
  ]);
}

/** Create Temporal's databases and apply its schema (idempotent: an up-to-date schema is left as is). */
export function setupTemporalSchema(sqlTool: string, t: SchemaTarget, log: Log = () => undefined): void {
  for (const args of schemaCommands(t)) {
    const r = spawnSync(sqlTool, args, { encoding: 'utf8' });
    const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
    // Re-running on an existing database: create-database and setup-schema report it; update-schema then applies nothing.
    if (r.status !== 0 && !/already exists/.test(out)) {
      throw new TroupeError(
        `temporal-sql-tool ${args.filter((a) => a !== t.password).join(' ')} failed (exit ${r.status}): ${out.trim().split('\n').slice(-3).join(' ')}`,
        'check that PostgreSQL is reachable and the user may create databases',
      );
    }
    log(
      `troupe: temporal-sql-tool ${args.at(-1) === 'create-database' ? 'create-database' : args.slice(args.indexOf('--database') + 2).join(' ')} on ${args[args.indexOf('--database') + 1]}: ok`,
    );
  }
}
