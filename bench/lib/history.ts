/**
 * Reading timings out of Temporal workflow histories: per training step of a
 * trainingRun, when each activity was scheduled, started and completed, and
 * where the step ended. Everything between activity executions on the step's
 * critical path is orchestration (task queue latency, workflow tasks, history
 * writes).
 */
import type { WorkflowHandle } from '@temporalio/client';

export type History = Awaited<ReturnType<WorkflowHandle['fetchHistory']>>;
type Event = NonNullable<History['events']>[number];

const toNumber = (v: unknown): number => (v === null || v === undefined ? 0 : typeof v === 'number' ? v : Number(String(v)));
export const eventMs = (e: Event): number => toNumber(e.eventTime?.seconds) * 1000 + toNumber(e.eventTime?.nanos) / 1e6;

export interface ActivitySpan {
  type: string;
  scheduled: number;
  started?: number;
  completed?: number;
  /** index of its scheduled event (for a local activity: its marker) */
  scheduledIndex: number;
  /** a local activity (planStep, finishStep): ran inside a workflow task, recorded as a marker */
  local?: boolean;
}

/**
 * A local activity's marker: its type and completion time (worker clock). It ran inside the
 * workflow task started last, after the local activities that task completed before it.
 */
function localActivity(e: Event): { type: string; completed: number } | undefined {
  const m = e.markerRecordedEventAttributes;
  if (m?.markerName !== 'core_local_activity') return undefined;
  const raw = m.details?.data?.payloads?.[0]?.data;
  if (!raw) return undefined;
  const data = JSON.parse(Buffer.from(raw).toString()) as { activity_type?: string; complete_time?: { seconds?: unknown; nanos?: unknown } };
  return { type: data.activity_type ?? '?', completed: toNumber(data.complete_time?.seconds) * 1000 + toNumber(data.complete_time?.nanos) / 1e6 };
}

export interface StepSpans {
  step: number;
  /** planStep scheduled (started, if local) -> the next activity scheduled after finishStep (ms since epoch) */
  start: number;
  end: number;
  activities: ActivitySpan[];
  /** child workflows started in the step (durable rollouts) */
  children: number;
  childStart?: number;
  childEnd?: number;
  /** history events of the parent that belong to this step */
  events: number;
}

/** Activities (by scheduled event, local ones by marker) with their start and completion times, in history order. */
export function activitySpans(history: History): ActivitySpan[] {
  const events = history.events ?? [];
  const byId = new Map<number, ActivitySpan>();
  const out: ActivitySpan[] = [];
  let taskFree = 0; // when the current workflow task could start its next local activity
  events.forEach((e, i) => {
    const id = toNumber(e.eventId);
    const local = localActivity(e);
    if (e.workflowTaskStartedEventAttributes) taskFree = eventMs(e);
    if (local) {
      const started = Math.min(taskFree, local.completed);
      out.push({ type: local.type, scheduled: started, started, completed: local.completed, scheduledIndex: i, local: true });
      taskFree = local.completed;
    } else if (e.activityTaskScheduledEventAttributes) {
      const span: ActivitySpan = { type: e.activityTaskScheduledEventAttributes.activityType?.name ?? '?', scheduled: eventMs(e), scheduledIndex: i };
      byId.set(id, span);
      out.push(span);
    } else if (e.activityTaskStartedEventAttributes) {
      const span = byId.get(toNumber(e.activityTaskStartedEventAttributes.scheduledEventId));
      if (span) span.started = eventMs(e);
    } else if (e.activityTaskCompletedEventAttributes) {
      const span = byId.get(toNumber(e.activityTaskCompletedEventAttributes.scheduledEventId));
      if (span) span.completed = eventMs(e);
    }
  });
  return out;
}

/** Splits a trainingRun history into its training steps (a step starts when its planStep is scheduled). */
export function stepSpans(history: History): StepSpans[] {
  const events = history.events ?? [];
  const acts = activitySpans(history);
  const plans = acts.filter((a) => a.type === 'planStep');
  return plans.map((plan, k) => {
    const finish = acts.find((a) => a.type === 'finishStep' && a.scheduledIndex > plan.scheduledIndex);
    const next = finish ? acts.find((a) => a.scheduledIndex > finish.scheduledIndex) : undefined;
    const endIndex = next ? next.scheduledIndex : events.length;
    const activities = acts.filter((a) => a.scheduledIndex >= plan.scheduledIndex && a.scheduledIndex < endIndex);
    let children = 0;
    let childStart: number | undefined;
    let childEnd: number | undefined;
    for (let i = plan.scheduledIndex; i < endIndex; i++) {
      const e = events[i]!;
      if (e.startChildWorkflowExecutionInitiatedEventAttributes) {
        children++;
        childStart ??= eventMs(e);
      }
      if (e.childWorkflowExecutionCompletedEventAttributes) childEnd = eventMs(e);
    }
    const end = next ? next.scheduled : eventMs(events[events.length - 1]!);
    return { step: k, start: plan.scheduled, end, activities, children, childStart, childEnd, events: endIndex - plan.scheduledIndex };
  });
}

/** Activity execution (started -> completed) of the first activity of a type, or the union span of all of them. */
export function execSpan(spans: ActivitySpan[], type: string): { ms: number; queuedMs: number } | undefined {
  const mine = spans.filter((s) => s.type === type && s.started !== undefined && s.completed !== undefined);
  if (mine.length === 0) return undefined;
  const start = Math.min(...mine.map((s) => s.started!));
  const end = Math.max(...mine.map((s) => s.completed!));
  const queued = Math.max(...mine.map((s) => s.started! - s.scheduled));
  return { ms: end - start, queuedMs: queued };
}

/** Counts of events and of activities in a child (episode) history. */
export function childCounts(history: History): { events: number; activities: number; workflowTasks: number } {
  const events = history.events ?? [];
  return {
    events: events.length,
    activities: events.filter((e) => e.activityTaskScheduledEventAttributes).length,
    workflowTasks: events.filter((e) => e.workflowTaskCompletedEventAttributes).length,
  };
}

export interface ChildTimings {
  /** workflow start -> completion (ms) */
  durationMs: number;
  /** per workflow task: scheduled -> started, started -> completed (ms) */
  workflowTasks: Array<{ queuedMs: number; execMs: number }>;
  /** per activity: type, scheduled -> started, started -> completed (ms) */
  activities: Array<{ type: string; queuedMs: number; execMs: number }>;
}

/** Where an episode child's wall time went, from its history. */
export function childTimings(history: History): ChildTimings {
  const events = history.events ?? [];
  const workflowTasks: ChildTimings['workflowTasks'] = [];
  let scheduled = 0;
  let started = 0;
  for (const e of events) {
    if (e.workflowTaskScheduledEventAttributes) scheduled = eventMs(e);
    else if (e.workflowTaskStartedEventAttributes) started = eventMs(e);
    else if (e.workflowTaskCompletedEventAttributes) workflowTasks.push({ queuedMs: started - scheduled, execMs: eventMs(e) - started });
  }
  const activities = activitySpans(history)
    .filter((a) => a.started !== undefined && a.completed !== undefined)
    .map((a) => ({ type: a.type, queuedMs: a.started! - a.scheduled, execMs: a.completed! - a.started! }));
  const first = events[0];
  const last = events[events.length - 1];
  return { durationMs: first && last ? eventMs(last) - eventMs(first) : 0, workflowTasks, activities };
}
