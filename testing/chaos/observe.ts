/**
 * A chaos run as the Temporal server records it (no worker and no store needed,
 * so the harness never talks to a PostgreSQL that is being killed): steps
 * committed, pending activities and their attempts, workflow tasks retried.
 */
import { TroupeStep } from '../../infra/search-attributes';
import type { KillRecord } from './report';
import type { ChaosStack } from './stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Steps committed so far, from the run's TroupeStep search attribute (the server's
 * record: no worker and no store needed, so the harness itself never talks to a
 * PostgreSQL that is being killed). undefined while the server is down.
 */
export async function stepsDone(stack: ChaosStack, runId: string): Promise<number | undefined> {
  const q = stack.client.workflow
    .getHandle(runId)
    .describe()
    .then((d) => d.typedSearchAttributes.get(TroupeStep) ?? 0);
  return Promise.race([q.catch(() => undefined), sleep(1500).then(() => undefined)]);
}

const ms = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => (t ? Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0);

/**
 * For control-worker kills that caught no activity: kill -> the first workflow
 * task started after a timed-out one (the run's workflow moving again on the
 * new worker), from the recorded histories of the run and its episode children.
 */
export async function measureWorkflowTasks(stack: ChaosStack, workflowId: string, kills: KillRecord[]): Promise<void> {
  const wanted = kills.filter((k) => k.kind === 'control-worker' && k.retryAfterMs === undefined);
  if (wanted.length === 0) return;
  const starts: number[] = [];
  const ids = [workflowId];
  for (let i = 0; i < ids.length && i < 2000; i++) {
    const history = await stack.client.workflow.getHandle(ids[i]!).fetchHistory();
    let timedOut = false;
    for (const e of history.events ?? []) {
      if (e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowId) ids.push(e.startChildWorkflowExecutionInitiatedEventAttributes.workflowId);
      if (e.workflowTaskTimedOutEventAttributes || e.workflowTaskFailedEventAttributes) timedOut = true;
      if (e.workflowTaskStartedEventAttributes) {
        if (timedOut) starts.push(ms(e.eventTime));
        timedOut = false;
      }
    }
  }
  starts.sort((x, y) => x - y);
  for (const k of wanted) {
    const first = starts.find((t) => t >= k.at);
    if (first !== undefined && first - k.at < 120_000) {
      k.retryAfterMs = first - k.at;
      k.retried = 'workflow task';
    }
  }
}

export interface Pending {
  key: string;
  workflowId: string;
  activityId: string;
  type: string;
  attempt: number;
  started: boolean;
  startedAt: number;
  identity: string;
}

/** Pending activities of the run and of its running episode children (server-side; no worker needed). */
export async function pendingWork(stack: ChaosStack, workflowId: string): Promise<Pending[]> {
  const describe = async (id: string) => (await stack.client.workflow.getHandle(id).describe()).raw;
  const root = await describe(workflowId);
  const all = [
    { id: workflowId, raw: root },
    ...(await Promise.all((root.pendingChildren ?? []).map(async (c) => ({ id: c.workflowId!, raw: await describe(c.workflowId!).catch(() => undefined) })))),
  ];
  return all.flatMap(({ id, raw }) =>
    (raw?.pendingActivities ?? []).map((a) => ({
      key: `${id}/${a.activityId}`,
      workflowId: id,
      activityId: a.activityId ?? '',
      type: a.activityType?.name ?? '?',
      attempt: a.attempt ?? 1,
      started: a.state === 2, // PENDING_ACTIVITY_STATE_STARTED
      startedAt: ms(a.lastStartedTime),
      identity: a.lastWorkerIdentity ?? '',
    })),
  );
}

/** The attempt number and start time of an activity's last attempt, from its workflow's history. */
async function lastAttempt(stack: ChaosStack, p: Pending): Promise<{ attempt: number; startedAt: number } | undefined> {
  const events = (await stack.client.workflow.getHandle(p.workflowId).fetchHistory()).events ?? [];
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityId === p.activityId);
  if (!scheduled) return undefined;
  const started = events.find(
    (e) => e.activityTaskStartedEventAttributes && String(e.activityTaskStartedEventAttributes.scheduledEventId) === String(scheduled.eventId),
  );
  return started ? { attempt: started.activityTaskStartedEventAttributes!.attempt ?? 1, startedAt: ms(started.eventTime) } : undefined;
}

/**
 * Follows the activities that were running on a killed worker (or, for an
 * engine kill, on its pool worker) until each has started its next attempt or
 * finished: kill -> retried activity start, measured from the server's own
 * record of the attempt's start.
 */
export async function followRetries(stack: ChaosStack, workflowId: string, lost: Pending[], at: number, isDone: () => boolean, timeoutMs = 90_000) {
  const open = new Map(lost.map((p) => [p.key, p]));
  const retries: Array<{ type: string; attempt: number; afterMs: number }> = [];
  let finished = 0;
  const deadline = Date.now() + timeoutMs;
  while (open.size > 0 && Date.now() < deadline && !isDone()) {
    const now = await pendingWork(stack, workflowId).catch(() => undefined); // the server may be restarting
    if (now) {
      for (const [key, before] of open) {
        const p = now.find((x) => x.key === key);
        if (!p) {
          // Closed between two polls: its history says whether a later attempt ran.
          const last = await lastAttempt(stack, before).catch(() => undefined);
          if (last && last.attempt > before.attempt) retries.push({ type: before.type, attempt: last.attempt, afterMs: last.startedAt - at });
          else finished++; // its result got through before the kill
          open.delete(key);
        } else if (p.attempt > before.attempt && p.started) {
          retries.push({ type: p.type, attempt: p.attempt, afterMs: p.startedAt - at });
          open.delete(key);
        }
      }
    }
    await sleep(250);
  }
  return { retries: retries.sort((a, b) => a.afterMs - b.afterMs), finished, unresolved: open.size };
}
