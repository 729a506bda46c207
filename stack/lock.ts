// A cross-process lock file: created with O_EXCL, holds the owner's pid; a lock whose
// owner died is taken over. withLockFile waits for it, for slow one-time work (building
// the Temporal CLI, initialising the embedded PostgreSQL) that two processes might start
// together; tryLockFile does not wait, for work that can go on without it (a build cache).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pidAlive } from './processes';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Takes the lock when it is free or its owner died: its release. Else the live holder's pid (this process's too). */
export function tryLockFile(lockPath: string): (() => void) | number {
  fs.mkdirSync(path.dirname(lockPath), { recursive: true });
  for (;;) {
    try {
      fs.writeFileSync(lockPath, String(process.pid), { flag: 'wx' });
      return () => fs.rmSync(lockPath, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let holder = NaN;
      try {
        holder = Number(fs.readFileSync(lockPath, 'utf8').trim());
      } catch {
        continue; // released between our open and read
      }
      if (Number.isInteger(holder) && holder > 0 && pidAlive(holder)) return holder;
      fs.rmSync(lockPath, { force: true }); // stale (or an empty file from a crash mid-write)
    }
  }
}

export async function withLockFile<T>(
  lockPath: string,
  fn: () => Promise<T>,
  opts: { onWait?: (holderPid: number) => void; pollMs?: number } = {},
): Promise<T> {
  let told = false;
  for (;;) {
    const got = tryLockFile(lockPath);
    if (typeof got === 'function') {
      try {
        return await fn();
      } finally {
        got();
      }
    }
    if (got === process.pid) {
      fs.rmSync(lockPath, { force: true }); // this process's own leftover
      continue;
    }
    if (!told) opts.onWait?.(got);
    told = true;
    await sleep(opts.pollMs ?? 500);
  }
}
