// troupe doctor: what this machine has, and whether Troupe's services answer.
import { GATEWAY_VARIABLES, loadConfig, redactUrl, temporalAddressOf, type TroupeConfig } from '../../infra/config';
import { checkGateway } from '../../gateway';
import { checkDatabase, connect } from '../../infra/db';
import { engineSpec } from '../../agents/model';
import { loadTeam, teams } from '../../agents/team-registry';
import { describeModel } from '../../engines/families';
import { errorMessage } from '../../infra/errors';
import { isSourceCheckout, packagesStaleReason } from '../../stack/install';
import { checkExecutionProviders, ortVersion } from '../../infra/onnx-check';
import { namespaceProblems } from '../../infra/namespace';
import { repoRoot } from '../../infra/paths';
import { TROUPE_SEARCH_ATTRIBUTES } from '../../infra/search-attributes';
import { embeddedPostgresStatus, embeddedPostgresUrl } from '../../stack/postgres';
import { MIN_GO_VERSION, findTemporalBinary, goVersion, temporalVersion, versionAtLeast } from '../../stack/temporal';
import { connectTemporal, pollerIdentities, temporalServerVersion } from '../../infra/temporal-connection';
import { loadMigrations, schemaVersion } from '../../schema/migrate';
import { pytorchEngine } from '../../stack/pytorch-engine';
import { activeProject } from '../../processes/project';
import { projectOf } from '../../processes/team-code';
import { defineCommand } from '../command';

type Status = 'ok' | 'warn' | 'FAIL' | 'info';

interface Line {
  status: Status;
  what: string;
  detail: string;
}

type Add = (status: Status, what: string, detail: string) => void;

/** `env` is where the gateway's variables are read (checkGateway), apart from `config`. */
export async function doctor(config: TroupeConfig, env: NodeJS.ProcessEnv = process.env): Promise<Line[]> {
  const lines: Line[] = [];
  const add: Add = (status, what, detail) => lines.push({ status, what, detail });
  checkToolchain(config, add);
  await checkTemporal(config, add);
  await checkPostgres(config, add);
  await checkRuntimes(add);
  // The gateway of the pool workers' episode threads, as a pool worker on this machine would start it
  lines.push(...checkGateway(env));
  add('info', 'device', `TROUPE_DEVICE=${config.device}`);
  add('info', 'state dir', config.stateDir);
  return lines;
}

/** Node, the packages, the project, Go, the Temporal CLI, and whether the PyTorch engine's environment is there. */
function checkToolchain(config: TroupeConfig, add: Add): void {
  const nodeMajor = Number(process.versions.node.split('.')[0]);
  add(nodeMajor >= 20 ? 'ok' : 'FAIL', 'node', `${process.version} (${process.execPath})${nodeMajor >= 20 ? '' : ' — Troupe needs Node ≥ 20'}`);
  if (isSourceCheckout(repoRoot)) {
    const stale = packagesStaleReason(repoRoot);
    add(stale ? 'warn' : 'ok', 'node_modules', stale ? `${stale} — any troupe command runs npm ci` : 'matches package-lock.json');
  } else add('info', 'troupe', `installed package ${repoRoot}`);
  const project = activeProject();
  add(
    'info',
    'project',
    project
      ? `${project.configFile}: teams ${Object.keys(project.config.teams).join(', ') || '(none)'}${project.warnings.length ? `; ${project.warnings.join('; ')}` : ''}`
      : `none (no troupe.config.ts above ${process.cwd()})`,
  );

  const go = goVersion();
  let bin: ReturnType<typeof findTemporalBinary>;
  let binError: string | undefined;
  try {
    bin = findTemporalBinary({ temporalBin: config.temporalBin });
  } catch (err) {
    binError = errorMessage(err);
  }
  if (go) {
    add(
      versionAtLeast(go, MIN_GO_VERSION) ? 'ok' : 'warn',
      'go',
      `go${go}${versionAtLeast(go, MIN_GO_VERSION) ? '' : ` — building the Temporal CLI needs Go ≥ ${MIN_GO_VERSION}`}`,
    );
  } else {
    add(
      bin || config.temporalAddress ? 'info' : 'FAIL',
      'go',
      `not installed${bin || config.temporalAddress ? ' (not needed: a temporal binary or TEMPORAL_ADDRESS is there)' : ` — install Go ≥ ${MIN_GO_VERSION}, or set TROUPE_TEMPORAL_BIN / TEMPORAL_ADDRESS`}`,
    );
  }
  if (binError) add('FAIL', 'temporal binary', binError);
  else if (bin) add('ok', 'temporal binary', `${bin.path} (from ${bin.source}): ${temporalVersion(bin.path)}`);
  else if (config.temporalAddress) add('info', 'temporal binary', 'not found (not needed: TEMPORAL_ADDRESS is set)');
  else if (go) add('warn', 'temporal binary', 'not built yet — `npx troupe up` builds it with Go (a few minutes, once)');
  else add('FAIL', 'temporal binary', 'not found, and no Go to build it — set TROUPE_TEMPORAL_BIN or TEMPORAL_ADDRESS, or install Go');

  // Engines other than the built-in one (optional)
  const torch = pytorchEngine({ install: false });
  add(
    'info',
    'pytorch engine',
    'missing' in torch
      ? `not available (only for --engine pytorch): ${torch.missing}`
      : `available: ${torch.command.join(' ')} (troupe worker pool --engine pytorch)`,
  );
}

/** The Temporal server, its namespace, and the workers polling this project's task queues. */
async function checkTemporal(config: TroupeConfig, add: Add): Promise<void> {
  const address = temporalAddressOf(config);
  const serverVersion = await temporalServerVersion(address, undefined, config);
  if (serverVersion) {
    add('ok', 'temporal server', `reachable at ${address} (server ${serverVersion}, namespace ${config.namespace})`);
    try {
      const connection = await connectTemporal(address, 'Temporal', config);
      try {
        const problems = await namespaceProblems(connection, config.namespace, address);
        if (problems.length === 0)
          add('ok', 'namespace', `"${config.namespace}" exists with Troupe's search attributes (${Object.keys(TROUPE_SEARCH_ATTRIBUTES).join(', ')})`);
        for (const p of problems) add('FAIL', 'namespace', `${p.what} — run: ${p.fix}`);
        const control = await pollerIdentities(connection, config.namespace, config.taskQueue, 'workflow');
        const pool = await pollerIdentities(connection, config.namespace, config.poolTaskQueue, 'activity');
        add(
          control.length ? 'ok' : 'warn',
          'control worker',
          control.length
            ? `${control.length} poller(s) on "${config.taskQueue}": ${control.join(', ')}`
            : `nobody polls "${config.taskQueue}" — \`npx troupe up\` starts one`,
        );
        add(
          pool.length ? 'ok' : 'info',
          'pool worker',
          pool.length ? `${pool.length} poller(s) on "${config.poolTaskQueue}": ${pool.join(', ')}` : `nobody polls "${config.poolTaskQueue}"`,
        );
        // Workers serve one project's teams: one serving another project would run the wrong code.
        const here = activeProject()?.dir;
        const served = (p: string | undefined) => (p ? `project ${p}` : 'no project');
        for (const id of new Set([...control, ...pool])) {
          const theirs = projectOf(id);
          if (theirs === here) continue;
          add(
            'FAIL',
            'worker project',
            `worker "${id}" serves ${served(theirs)}, this is ${served(here)} — stop it (\`npx troupe down\` there), or give each project its own task queues (stack: { TROUPE_TASK_QUEUE, TROUPE_POOL_TASK_QUEUE } in troupe.config.ts)`,
          );
        }
        if (control.length + pool.length > 0 && [...control, ...pool].every((id) => projectOf(id) === here))
          add('ok', 'worker project', `the workers serve ${served(here)}`);
      } finally {
        await connection.close();
      }
    } catch (err) {
      add('warn', 'task queues', errorMessage(err));
    }
  } else {
    add(
      config.temporalAddress ? 'FAIL' : 'warn',
      'temporal server',
      `not reachable at ${address}${config.temporalAddress ? ' (TEMPORAL_ADDRESS)' : ' — `npx troupe up` starts the dev server'}`,
    );
  }
}

/** PostgreSQL (DATABASE_URL or the embedded one) and its schema version against the code's migrations. */
async function checkPostgres(config: TroupeConfig, add: Add): Promise<void> {
  let dbUrl: string | undefined = config.databaseUrl;
  if (!dbUrl) {
    const st = embeddedPostgresStatus(config.stateDir);
    if (st.running) dbUrl = embeddedPostgresUrl(st.port ?? config.postgresPort);
    else
      add(
        'warn',
        'postgres',
        `embedded PostgreSQL ${st.initialised ? 'is initialised but not running' : 'not initialised yet'} (${config.stateDir}/postgres) — \`npx troupe up\` starts it`,
      );
  }
  if (dbUrl) {
    try {
      const { serverVersion: pgVersion } = await checkDatabase(dbUrl, { tls: config.databaseTls });
      add('ok', 'postgres', `reachable: ${redactUrl(dbUrl)} (server_version ${pgVersion}; ${config.databaseUrl ? 'DATABASE_URL' : 'embedded'})`);
      const sql = connect(dbUrl, { max: 1, tls: config.databaseTls });
      try {
        const v = await schemaVersion(sql);
        const migrations = loadMigrations();
        const newest = migrations.length ? migrations[migrations.length - 1]!.version : 0;
        add(
          v > newest ? 'FAIL' : v === newest ? 'ok' : 'info',
          'schema',
          `version ${v}, code's newest migration ${newest}${v < newest ? ' (applied at start-up)' : v > newest ? ' — database is newer than this code' : ''}`,
        );
      } finally {
        await sql.end({ timeout: 1 });
      }
    } catch (err) {
      add('FAIL', 'postgres', errorMessage(err));
    }
  }
}

/** onnxruntime-node's execution providers, and each of the project's teams as its models load. */
async function checkRuntimes(add: Add): Promise<void> {
  try {
    const providers = await checkExecutionProviders();
    add('info', 'onnxruntime-node', `version ${ortVersion()}`);
    for (const p of providers) {
      add(p.ok ? 'ok' : p.name === 'cpu' ? 'FAIL' : 'info', `ort ${p.name} EP`, p.detail);
    }
  } catch (err) {
    add('FAIL', 'onnxruntime-node', `cannot load: ${errorMessage(err)}`);
  }
  // The project's teams: each model checked by its family (the same check as team load)
  for (const name of Object.keys(teams)) {
    try {
      const team = loadTeam(name);
      add(
        'ok',
        `team ${name}`,
        Object.entries(team.models)
          .map(([m, spec]) => `${m}: ${describeModel(engineSpec(spec))}`)
          .join('; '),
      );
    } catch (err) {
      add('FAIL', `team ${name}`, errorMessage(err));
    }
  }
}

export default defineCommand({
  name: 'doctor',
  summary: 'Check Node, Go, the Temporal CLI, Temporal, PostgreSQL, onnxruntime execution providers and the gateway',
  usage: 'troupe doctor',
  description: 'Exits 1 if something Troupe needs is broken (FAIL); warnings are things `troupe up` would fix.',
  async run() {
    // The gateway's variables are checked on their own lines: a mistake there is a FAIL among the others, not the end of the report.
    const rest = Object.fromEntries(Object.entries(process.env).filter(([k]) => !GATEWAY_VARIABLES.includes(k)));
    const lines = await doctor(loadConfig(rest));
    const width = Math.max(...lines.map((l) => l.what.length));
    for (const l of lines) console.log(`${l.status.padEnd(4)}  ${l.what.padEnd(width)}  ${l.detail}`);
    return lines.some((l) => l.status === 'FAIL') ? 1 : 0;
  },
});
