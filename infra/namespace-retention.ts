// How long Temporal keeps closed workflows' histories in a namespace (its retention), and
// setting it to match Troupe's episode retention (issue #49): with TROUPE_RETENTION_EPISODE_DAYS
// set, `troupe up` gives the dev server it manages the same window, so neither store keeps a
// run's episodes much longer than the other. A cluster's operator sets it with
// `temporal operator namespace update --retention` (docs/operations.md).
//
//   await setNamespaceRetention(connection, 'default', 7);   // 7 days
//   await namespaceRetentionDays(connection, 'default');     // 7
import type { Connection } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { google } from '@temporalio/proto';
import { TroupeError } from './errors';

type AnyConnection = Pick<Connection, 'workflowService' | 'withDeadline'> | Pick<NativeConnection, 'workflowService' | 'withDeadline'>;

const DAY_S = 86_400;

/** The retention that matches an episode window of `keepDays`: whole days (Temporal's unit in practice), at least 1. */
export function matchingRetentionDays(keepDays: number): number {
  if (!(Number.isFinite(keepDays) && keepDays > 0)) throw new TroupeError(`keepDays: must be a number of days > 0 (got ${keepDays})`);
  return Math.max(1, Math.ceil(keepDays));
}

/** The namespace's retention in days (fractional when set in hours), or undefined when the server reports none. */
export async function namespaceRetentionDays(connection: AnyConnection, namespace: string): Promise<number | undefined> {
  const res = await connection.withDeadline(Date.now() + 5000, () => connection.workflowService.describeNamespace({ namespace }));
  const ttl = res.config?.workflowExecutionRetentionTtl;
  if (!ttl) return undefined;
  return Number(ttl.seconds ?? 0) / DAY_S;
}

/** Sets the namespace's retention to `days` (applies to workflows that close from now on). */
export async function setNamespaceRetention(connection: AnyConnection, namespace: string, days: number): Promise<void> {
  if (!(Number.isFinite(days) && days > 0)) throw new TroupeError(`retention: must be a number of days > 0 (got ${days})`);
  await connection.withDeadline(Date.now() + 5000, () =>
    connection.workflowService.updateNamespace({
      namespace,
      config: { workflowExecutionRetentionTtl: google.protobuf.Duration.fromObject({ seconds: Math.round(days * DAY_S) }) },
    }),
  );
}
