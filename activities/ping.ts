// The trivial end-to-end activity: write a row to `pings`, read it back.
// Idempotent: keyed by the calling workflow's id, so a retry returns the same row.
import { Context } from '@temporalio/activity';
import type { Sql } from '../infra/db';

export interface PingRow {
  id: number;
  workflowId: string;
  message: string;
  /** ISO 8601. */
  createdAt: string;
}

export function createPingActivities(deps: { sql: Sql }) {
  const { sql } = deps;
  return {
    /** Insert (once per workflow) and read back the ping row. */
    async recordPing(input: { message: string }): Promise<PingRow> {
      const info = Context.current().info;
      const workflowId = info.workflowExecution?.workflowId ?? `activity:${info.activityId}`;
      await sql`
        insert into pings (workflow_id, message) values (${workflowId}, ${input.message})
        on conflict (workflow_id) do nothing`;
      const [row] = await sql<{ id: number; workflow_id: string; message: string; created_at: Date }[]>`
        select id, workflow_id, message, created_at from pings where workflow_id = ${workflowId}`;
      return { id: row!.id, workflowId: row!.workflow_id, message: row!.message, createdAt: row!.created_at.toISOString() };
    },
  };
}
