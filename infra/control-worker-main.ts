// Process entry of the control worker; `troupe up` starts it in the background:
//   node --import tsx infra/control-worker-main.ts [--temporal-address H:P] [--namespace N] [--task-queue Q]
// Configuration otherwise comes from the environment (infra/config.ts). It connects to
// Postgres (DATABASE_URL, else the embedded one), applies migrations, then polls until
// SIGINT/SIGTERM, on which it finishes in-flight tasks and exits. Until PostgreSQL and
// Temporal answer it waits for them with capped backoff, saying so in its log.
import { parseArgs } from 'node:util';
import type { Worker } from '@temporalio/worker';
import { loadConfig, redactUrl, temporalAddressOf } from './config';
import { untilAvailable } from './backoff';
import { createControlWorker } from './control-worker';
import { dashboardUrl } from '../dashboard/service';
import { connect } from './db';
import { formatError, isTroupeError } from './errors';
import { assertNamespaceReady } from './namespace';
import { ensureDatabase } from './postgres';
import { connectTemporalWorker } from './temporal';
import { migrate } from '../schema/migrate';

export const READY_LINE = 'troupe control worker: ready';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'temporal-address': { type: 'string' },
      namespace: { type: 'string' },
      'task-queue': { type: 'string' },
    },
  });
  await runControlWorkerProcess({ temporalAddress: values['temporal-address'], namespace: values.namespace, taskQueue: values['task-queue'] });
}

/**
 * The control worker as a process (this file's entry, `troupe worker control`): runs until
 * SIGINT/SIGTERM. `onReady` gets the worker once it exists (before it polls).
 */
export async function runControlWorkerProcess(opts: { temporalAddress?: string; namespace?: string; taskQueue?: string; onReady?: (worker: Worker) => void }): Promise<void> {
  const config = loadConfig();
  const address = opts.temporalAddress ?? temporalAddressOf(config);
  const namespace = opts.namespace ?? config.namespace;
  const taskQueue = opts.taskQueue ?? config.taskQueue;

  // PostgreSQL and Temporal may be down or still starting: wait for each (capped backoff)
  // instead of exiting, so the worker comes up by itself once they do.
  const waiting = (line: string) => console.log(`troupe control worker: ${line}`);
  let stopping = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void (stopping = true));
  const wait = { log: waiting, stopped: () => stopping };
  const db = await untilAvailable('PostgreSQL', () => ensureDatabase(config, console.log), wait);
  const sql = connect(db.url, { max: 10, applicationName: 'troupe-control-worker' });
  const { from, to } = await untilAvailable('PostgreSQL (migrations)', () => migrate(sql, { log: console.log }), wait);
  console.log(`troupe control worker: database ${redactUrl(db.url)} (schema ${from} -> ${to})`);

  const { connection, worker } = await untilAvailable(
    `Temporal at ${address} (namespace ${namespace})`,
    async () => {
      const connection = await connectTemporalWorker(address, config);
      try {
        await assertNamespaceReady(connection, namespace, address);
        return { connection, worker: await createControlWorker({ connection, namespace, taskQueue, sql, poolTaskQueue: config.poolTaskQueue, dashboardUrl: dashboardUrl(config), payloadKeys: config.payloadKeys }) };
      } catch (e) {
        await connection.close().catch(() => undefined);
        throw e;
      }
    },
    // A namespace that is not ready is a fix for the operator (the error says which), not an outage.
    { ...wait, retryable: (e) => !isTroupeError(e) },
  );
  try {
    console.log(`${READY_LINE} (temporal ${address}, namespace ${namespace}, task queue ${taskQueue})`);
    opts.onReady?.(worker);
    await worker.run();
  } finally {
    await connection.close();
    await sql.end({ timeout: 5 });
  }
  console.log('troupe control worker: stopped');
}

if (require.main === module) {
  main().catch((err) => {
    console.error(formatError(err, { debug: true }));
    process.exit(1);
  });
}
