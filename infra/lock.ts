// A cross-process lock file: created with O_EXCL, holds the owner's pid; a lock whose
// owner died is taken over. For slow one-time work (building the Temporal CLI,
// initialising the embedded PostgreSQL) that two processes might start together.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pidAlive } from './processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function withLockFile<T>(
  lockPath: string,
  fn: () => Promise<T>,
  opts: { onWait?: (holderPid: number) => void; pollMs?: number } = {},
): Promise<T> {
  fs.mkdirSync(path.dirname(lockPath), { recursive: true });
  let told = false;
  for (;;) {
    try {
      fs.writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let holder = NaN;
      try {
        holder = Number(fs.readFileSync(lockPath, 'utf8').trim());
      } catch {
        continue; // released between our open and read
      }
      if (!Number.isInteger(holder) || holder <= 0 || !pidAlive(holder) || holder === process.pid) {
        fs.rmSync(lockPath, { force: true }); // stale (or an empty file from a crash mid-write)
        continue;
      }
      if (!told) opts.onWait?.(holder);
      told = true;
      await sleep(opts.pollMs ?? 500);
    }
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lockPath, { force: true });
  }
}
