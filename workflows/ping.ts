// The trivial end-to-end workflow: one activity on the control queue writes and reads
// back a row in Postgres. `npx troupe ping` runs it; so can the Web UI's "Start Workflow"
// (workflow type pingWorkflow, task queue troupe, input {"message": "hi"}).
import { proxyActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../activities';
import type { PingRow } from '../activities/ping';

const { recordPing } = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 5 },
});

export interface PingInput {
  message: string;
}

export async function pingWorkflow(input: PingInput): Promise<PingRow> {
  return recordPing({ message: input?.message ?? 'ping' });
}
