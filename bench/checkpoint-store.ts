/**
 * Checkpoint store throughput: a version of N MiB (weights; optimizer state
 * twice that, as AdamW keeps) written crash-safely (temp, fsync, rename, fsync
 * dirs) and read back with its sha256 checked. Prints a table; not a test.
 *
 *   node --import tsx bench/checkpoint-store.ts [MiB of weights, default 64] [dir, default a temp dir]
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CheckpointStore } from '../infra/checkpoint-store';

async function main() {
  const mib = Number(process.argv[2] ?? 64);
  const dir = process.argv[3] ?? fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-bench-ckpt-'));
  console.log(`command: node --import tsx bench/checkpoint-store.ts ${mib} ${process.argv[3] ?? ''}`.trim());
  const store = new CheckpointStore({ dir, inlineMaxBytes: 0 });
  const weights = new Uint8Array(mib << 20).map((_, i) => (i * 31) & 255);
  const optimizer = new Uint8Array(2 * (mib << 20)).map((_, i) => (i * 7) & 255);
  const rows: string[] = ['| step | MiB | seconds | MiB/s |', '|---|---|---|---|'];
  const time = async <T>(what: string, bytes: number, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    const r = await fn();
    const s = (performance.now() - t) / 1000;
    rows.push(`| ${what} | ${(bytes / 2 ** 20).toFixed(0)} | ${s.toFixed(2)} | ${(bytes / 2 ** 20 / s).toFixed(0)} |`);
    return r;
  };
  const total = weights.length + optimizer.length;
  const refs = await time('put (hash, write, fsync, rename)', total, async () => [
    await store.put('bench', 'policy', 1, 'weights', weights),
    await store.put('bench', 'policy', 1, 'optimizer', optimizer),
  ]);
  await time('read (sha256 checked)', total, async () => Promise.all(refs.map((r) => store.read(r))));
  console.log(rows.join('\n'));
  if (!process.argv[3]) fs.rmSync(dir, { recursive: true, force: true });
}

void main();
