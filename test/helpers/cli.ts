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
