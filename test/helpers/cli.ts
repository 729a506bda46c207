// The `troupe` command as a user runs it (cli/bin.js in a child process), on free ports, a
// temp state dir and a fresh database, so it never meets a developer's own `troupe up`.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { repoRoot } from '../../infra/paths';
import { createTestDatabase, type TestDatabase } from '../../testing/database';
import { freePort } from '../../testing/ports';
import { uniqueTaskQueue } from '../../testing/temporal';

const bin = path.join(repoRoot, 'cli', 'bin.js');

export function troupe(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

/** An environment for a stack of its own; `cleanup` runs `down`, drops the database and removes the state dir. */
export async function cliStack(
  extra: NodeJS.ProcessEnv = {},
): Promise<{ env: NodeJS.ProcessEnv; stateDir: string; db: TestDatabase; cleanup: () => Promise<void> }> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-up-'));
  const db = await createTestDatabase({ migrate: false }); // `up` migrates it
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TROUPE_STATE_DIR: stateDir,
    TROUPE_TEMPORAL_PORT: String(await freePort()),
    TROUPE_TEMPORAL_UI_PORT: String(await freePort()),
    TROUPE_DASHBOARD_PORT: String(await freePort()),
    TROUPE_TASK_QUEUE: uniqueTaskQueue('control'),
    TROUPE_POOL_TASK_QUEUE: uniqueTaskQueue('pool'),
    DATABASE_URL: db.url,
    TEMPORAL_ADDRESS: '',
    TROUPE_DEBUG: '',
    ...extra,
  };
  const cleanup = async () => {
    await troupe(['down'], env);
    await db.drop();
    fs.rmSync(stateDir, { recursive: true, force: true });
  };
  return { env, stateDir, db, cleanup };
}

type StackDb = Awaited<ReturnType<typeof cliStack>>['db'];

/** The ids of the runs in a stack's store now: the runs a test's own is not. */
export async function storedRunIds(db: StackDb): Promise<Set<string>> {
  return new Set((await db.sql<{ run_id: string }[]>`SELECT run_id FROM runs`.catch(() => [])).map((r) => r.run_id));
}

/** Waits (up to `timeoutMs`) for a run of `team` that is not among `earlier` to be stored; its id, or undefined. */
export async function newRunId(db: StackDb, team: string, earlier: Set<string>, timeoutMs = 300_000): Promise<string | undefined> {
  for (const t0 = Date.now(); Date.now() - t0 < timeoutMs; await new Promise((r) => setTimeout(r, 500))) {
    const rows = await db.sql<{ run_id: string }[]>`SELECT run_id FROM runs WHERE team = ${team}`.catch(() => []);
    const id = rows.find((r) => !earlier.has(r.run_id))?.run_id;
    if (id) return id;
  }
  return undefined;
}
