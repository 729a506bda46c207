// Process entry of the control worker; `troupe up` starts it in the background:
//   node --import tsx infra/control-worker-main.ts [--temporal-address H:P] [--namespace N] [--task-queue Q]
// Configuration otherwise comes from the environment (infra/config.ts). It connects to
// Postgres (DATABASE_URL, else the embedded one), applies migrations, then polls until
// SIGINT/SIGTERM, on which it finishes in-flight tasks and exits.
import { parseArgs } from 'node:util';
import { NativeConnection } from '@temporalio/worker';
import { loadConfig, redactUrl, temporalAddressOf } from './config';
import { createControlWorker } from './control-worker';
import { connect } from './db';
import { formatError } from './errors';
import { ensureDatabase } from './postgres';
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
  const config = loadConfig();
  const address = values['temporal-address'] ?? temporalAddressOf(config);
  const namespace = values.namespace ?? config.namespace;
  const taskQueue = values['task-queue'] ?? config.taskQueue;

  const db = await ensureDatabase(config, console.log);
  const sql = connect(db.url, { max: 10, applicationName: 'troupe-control-worker' });
  const { from, to } = await migrate(sql, { log: console.log });
  console.log(`troupe control worker: database ${redactUrl(db.url)} (schema ${from} -> ${to})`);

  const connection = await NativeConnection.connect({ address });
  try {
    const worker = await createControlWorker({ connection, namespace, taskQueue, sql });
    console.log(`${READY_LINE} (temporal ${address}, namespace ${namespace}, task queue ${taskQueue})`);
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
