/** A real short run on the real stack, and a dashboard over its database, for the dashboard's tests. */
import { startDashboard, type Dashboard, type DashboardOptions } from '../../../dashboard/server';
import { freePort } from '../../helpers';
import { startHarness, type Harness } from '../../../testing/stack';

export const RUN = { team: 'math', steps: 2, groupsPerStep: 2, groupSize: 4, rollout: 'batched', evalEvery: 1, evalTasks: 4, seed: 3 } as const;

/** The run (batched unless `rollout` says otherwise), then the dashboard on the port its control worker links to. */
export async function runAndServe(
  runId: string,
  opts: Partial<DashboardOptions> = {},
  run: Partial<Record<keyof typeof RUN, unknown>> = {},
): Promise<{ h: Harness; dash: Dashboard }> {
  const port = await freePort();
  const h = await startHarness({ dashboardUrl: `http://127.0.0.1:${port}` });
  await h.env.client.workflow.execute('trainingRun', { taskQueue: h.taskQueue, workflowId: runId, args: [{ ...RUN, ...run }] });
  const dash = await startDashboard({ sql: h.db.sql, port, temporalAddress: h.env.address, namespace: h.env.namespace ?? 'default', ...opts });
  return { h, dash };
}

export async function getJson(url: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const res = await fetch(url, init);
  return { status: res.status, body: await res.json() };
}
