/**
 * Small, pure helpers for writing reward functions (exported from 'troupe'). Workflow-safe:
 * batched episodes score in the pool worker, durable ones may score in the sandbox.
 *
 *   rewards: { solver: ({ task, turn }) => ({ correct: numericMatch(turn.reply, task.answer) }) }
 */
import type { RewardFn, SplitRewards } from './team';

/** Lower case, whitespace runs collapsed to one space, trimmed, one trailing `.` dropped: how answers compare. */
export function normalizeAnswer(text: string): string {
  return text.toLowerCase().replace(/\s+/g, ' ').trim().replace(/\.$/, '');
}

/** 1 when the two answers are equal after normalizeAnswer, else 0. */
export function exactMatch(prediction: string, reference: string): number {
  return normalizeAnswer(prediction) === normalizeAnswer(reference) ? 1 : 0;
}

/** The last number written in `text` (`-12`, `3.5`, `1,024`, `.5`), or undefined when there is none. */
export function lastNumber(text: string): number | undefined {
  const all = text.match(/-?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?/g)?.filter((m) => /\d/.test(m));
  if (!all?.length) return undefined;
  return Number(all.at(-1)!.replace(/,/g, ''));
}

/** 1 when the last number in `prediction` is within `tolerance` of `reference` (absolute), else 0 (also when there is none). */
export function numericMatch(prediction: string, reference: number, tolerance = 0): number {
  const n = lastNumber(prediction);
  return n !== undefined && Math.abs(n - reference) <= tolerance ? 1 : 0;
}

/**
 * Token-overlap F1 of two answers (whitespace tokens after normalizeAnswer, counted as
 * multisets): 2·P·R / (P + R), where P is the share of the prediction's tokens found in the
 * reference and R the share of the reference's found in the prediction. 1 when both are empty.
 */
export function tokenF1(prediction: string, reference: string): number {
  const p = normalizeAnswer(prediction).split(' ').filter(Boolean);
  const r = normalizeAnswer(reference).split(' ').filter(Boolean);
  if (p.length === 0 || r.length === 0) return p.length === r.length ? 1 : 0;
  const left = new Map<string, number>();
  for (const t of r) left.set(t, (left.get(t) ?? 0) + 1);
  let common = 0;
  for (const t of p) {
    const n = left.get(t) ?? 0;
    if (n > 0) {
      common++;
      left.set(t, n - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / p.length;
  const recall = common / r.length;
  return (2 * precision * recall) / (precision + recall);
}

/**
 * A role's reward on its last turn only; its earlier turns get the same components at 0.
 * A reward function is called once per turn of its role, so an episode-level reward of a role
 * that takes several turns is otherwise counted on each of them.
 */
export function onLastTurn<TTask, TOutcome>(reward: RewardFn<TTask, TOutcome>): RewardFn<TTask, TOutcome> {
  return (args) => {
    const components = reward(args);
    const last = args.turns.filter((t) => t.agent === args.turn.agent).at(-1);
    if (last?.index === args.turn.index) return components;
    const zero = (c: Record<string, number> | undefined) => Object.fromEntries(Object.keys(c ?? {}).map((k) => [k, 0]));
    // the { episode, turn } form keeps its parts (agents/team.ts RewardFn)
    if (Object.values(components).some((v) => typeof v === 'object' && v !== null)) {
      const split = components as SplitRewards;
      return { episode: zero(split.episode), turn: zero(split.turn) };
    }
    return zero(components as Record<string, number>);
  };
}
