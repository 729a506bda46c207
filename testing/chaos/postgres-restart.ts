/**
 * What a PostgreSQL crash does to a live postgres.js pool (infra/db.ts), on its
 * own, without Temporal: 12 loops run small transactions through one pool while
 * the embedded PostgreSQL of a temp state dir is SIGKILLed and restarted.
 *
 *   node --import tsx testing/chaos/postgres-restart.ts [--rounds N]
 *
 * Counts queries that fail (expected: they are retried by the activities),
 * queries that never settle (a connection left unable to write), and uncaught
 * exceptions from the driver (porsager/postgres#1154: `socket.write` on a closed
 * connection, which ends a worker process). Exit code 1 if either of the last
 * two happened. Found by the chaos test; see docs/durability.md, "Known issues".
 */
import { parseArgs } from 'node:util';
import { connect } from '../../infra/db';
import { startChaosStack } from './stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { rounds: { type: 'string' } } });
  const rounds = Math.min(50, Math.max(1, Number(values.rounds ?? 6)));
  const crashes: string[] = [];
  process.on('uncaughtException', (e) => {
    if (!/reading 'write'/.test(String(e?.message))) throw e;
    crashes.push(String(e.stack).split('\n').slice(0, 2).join(' | '));
  });
  const stack = await startChaosStack({});
  const sql = connect(stack.databaseUrl, { max: 10 });
  let ok = 0;
  let failed = 0;
  const pending = new Map<number, number>();
  let next = 0;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const id = next++;
      pending.set(id, Date.now());
      try {
        await sql.begin(async (tx) => {
          await tx`select pg_sleep(0.01)`;
          await tx`select 1`;
        });
        ok++;
      } catch {
        failed++;
        await sleep(100);
      } finally {
        pending.delete(id);
      }
    }
  };
  const loops = Array.from({ length: 12 }, loop);
  try {
    for (let i = 0; i < rounds; i++) {
      await sleep(2000);
      await stack.kill('postgres');
      await sleep(800);
      await stack.restart();
      await sleep(3000);
      console.log(`round ${i + 1}/${rounds}: ${ok} ok, ${failed} failed, ${crashes.length} driver crashes`);
    }
    await sleep(12_000); // anything still pending now will not settle by itself
    const now = Date.now();
    const hung = [...pending.values()].filter((t) => now - t > 10_000).length;
    console.log(
      `after ${rounds} PostgreSQL crashes: ${ok} transactions ok, ${failed} failed (retryable), ${hung} never settled, ${crashes.length} uncaught driver exceptions`,
    );
    for (const c of crashes.slice(0, 3)) console.log(`  ${c}`);
    stop = true;
    await Promise.race([Promise.all(loops), sleep(3000)]);
    return hung > 0 || crashes.length > 0 ? 1 : 0;
  } finally {
    stop = true;
    await stack.shutdown();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(2);
  },
);
