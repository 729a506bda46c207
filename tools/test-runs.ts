/**
 * Test runs own their stacks. `npm test` (tools/test.js) claims a folder for its run, records
 * itself there as the owner (a service record, stack/processes.ts) and runs the tests with that
 * folder as their state-dir marker and their TMPDIR: every process a test starts (Temporal dev
 * servers, workers, engines, CLI stacks and their services) carries the marker, and every temp
 * folder a test makes lies inside. A run killed before it cleaned up leaves them behind; the
 * next run sweeps each folder whose owner is dead: ends its marked processes, removes it. A
 * folder whose owner lives is another run going on, and is never touched.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  endMarkedProcesses,
  procArgv,
  readRecord,
  recordIsRunning,
  SERVICE_NAME_ENV,
  SERVICE_STATE_DIR_ENV,
  writeRecord,
  type MarkedProcess,
} from '../stack/processes';

export const TEST_RUN_PREFIX = 'troupe-test-run-';
/** The owner's record in a test run's folder. */
export const TEST_RUN_OWNER = 'test-run';

/** Claims a folder under `root` for a test run owned by this process. */
export function claimTestRun(root = os.tmpdir()): string {
  const dir = fs.mkdtempSync(path.join(root, TEST_RUN_PREFIX));
  // it stands in for /tmp: the embedded PostgreSQL's user (run as root) must reach state dirs in it
  fs.chmodSync(dir, 0o755);
  writeRecord(dir, { name: TEST_RUN_OWNER, pid: process.pid, argv: procArgv(process.pid) ?? process.argv, log: '', startedAt: new Date().toISOString() });
  return dir;
}

/** The environment of a test run's processes: marked as the run's, their temp folders inside it. */
export function testRunEnv(dir: string, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...env, [SERVICE_STATE_DIR_ENV]: dir, [SERVICE_NAME_ENV]: TEST_RUN_OWNER, TMPDIR: dir };
}

export interface SweptRun {
  dir: string;
  ended: MarkedProcess[];
}

/**
 * Ends the processes of every test run under `root` whose owner is dead and removes its folder.
 * A folder without an owner record is one being claimed (the record follows at once) unless it
 * is older than a minute.
 */
export async function sweepStaleTestRuns(root = os.tmpdir()): Promise<SweptRun[]> {
  const swept: SweptRun[] = [];
  for (const name of fs.readdirSync(root).filter((n) => n.startsWith(TEST_RUN_PREFIX))) {
    const dir = path.join(root, name);
    const owner = readRecord(dir, TEST_RUN_OWNER);
    if (owner ? recordIsRunning(owner) : Date.now() - mtimeMs(dir) < 60_000) continue;
    const ended = await endMarkedProcesses(dir);
    fs.rmSync(dir, { recursive: true, force: true });
    swept.push({ dir, ended });
  }
  return swept;
}

function mtimeMs(dir: string): number {
  try {
    return fs.statSync(dir).mtimeMs;
  } catch {
    return Date.now();
  }
}
