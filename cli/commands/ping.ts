// troupe ping: run the trivial workflow (control worker → activity → Postgres row).
import { loadConfig, temporalAddressOf } from '../../infra/config';
import { TroupeError, errorMessage } from '../../infra/errors';
import { connectTemporal, pollerIdentities, temporalClient } from '../../infra/temporal-connection';
import type { PingRow } from '../../activities/ping';
import type { pingWorkflow } from '../../workflows';
import { defineCommand } from '../command';

export interface PingOptions {
  address: string;
  namespace: string;
  taskQueue: string;
  message: string;
  timeoutMs?: number;
}

/** Start pingWorkflow on the control queue and wait for its row. */
export async function runPing(o: PingOptions): Promise<{ workflowId: string; row: PingRow }> {
  const connection = await connectTemporal(o.address);
  try {
    const pollers = await pollerIdentities(connection, o.namespace, o.taskQueue, 'workflow');
    if (pollers.length === 0) {
      throw new TroupeError(
        `no control worker is polling task queue "${o.taskQueue}" on ${o.address} (namespace ${o.namespace})`,
        'start one with `npx troupe up`',
      );
    }
    const client = temporalClient(connection, o.namespace);
    const workflowId = `troupe-ping-${Date.now()}`;
    const handle = await client.workflow.start<typeof pingWorkflow>('pingWorkflow', {
      taskQueue: o.taskQueue,
      workflowId,
      args: [{ message: o.message }],
      workflowExecutionTimeout: o.timeoutMs ?? 60_000,
    });
    try {
      const row = await handle.result();
      return { workflowId, row };
    } catch (err) {
      throw new TroupeError(
        `ping workflow ${workflowId} failed: ${errorMessage((err as { cause?: unknown }).cause ?? err)}`,
        'see the control worker log (<state>/control-worker.log) and the workflow in the Web UI',
      );
    }
  } finally {
    await connection.close();
  }
}

export function formatPingRow(row: PingRow): string {
  return `pings row: id=${row.id} message=${JSON.stringify(row.message)} workflow_id=${row.workflowId} created_at=${row.createdAt}`;
}

export default defineCommand({
  name: 'ping',
  summary: 'Run the trivial workflow: a control-worker activity writes a row to Postgres and reads it back',
  usage: 'troupe ping [--message TEXT]',
  description:
    'Proves the wiring of `troupe up`: Temporal, the control worker, and PostgreSQL.\n' +
    'Starts pingWorkflow on the control task queue and prints the row from the `pings` table.',
  options: {
    message: { type: 'string', short: 'm', valueName: 'TEXT', description: 'text to store', default: 'hello from troupe' },
    timeout: { type: 'string', valueName: 'SECONDS', description: 'give up after this long', default: '60' },
  },
  async run({ values }) {
    const config = loadConfig();
    const timeout = Number(values.timeout);
    if (!Number.isFinite(timeout) || timeout <= 0) throw new TroupeError('ping: --timeout must be a positive number of seconds', 'e.g. --timeout 30');
    const { row } = await runPing({
      address: temporalAddressOf(config),
      namespace: config.namespace,
      taskQueue: config.taskQueue,
      message: values.message ?? 'hello from troupe',
      timeoutMs: timeout * 1000,
    });
    console.log(formatPingRow(row));
    return 0;
  },
});
