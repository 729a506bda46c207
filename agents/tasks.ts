/**
 * Task sources with a train split and a held-out eval split. A task's split is
 * a pure function of its id and the source's seed, so adding tasks never moves
 * an existing task between splits.
 */
import { type z } from 'zod';
import { deriveSeed, seededRandom } from './seed';

export type Split = 'train' | 'eval';

export interface Task<T = unknown> {
  id: string;
  split: Split;
  data: T;
}

/** Tasks made by a seeded generator: pure, so also usable inside workflows. */
export interface GeneratedTasks<T> {
  readonly kind: 'generated';
  readonly evalFraction: number;
  all(): Task<T>[];
}

/** Tasks read from a JSONL file (one JSON object a line) and validated by `schema`. Loaded by an activity. */
export interface JsonlTasks<T> {
  readonly kind: 'jsonl';
  readonly path: string;
  readonly schema: z.ZodType<T>;
  readonly evalFraction: number;
  readonly seed: number;
  readonly idField: string;
}

export type TaskSource<T = unknown> = GeneratedTasks<T> | JsonlTasks<T>;

function checkFraction(where: string, f: number) {
  if (!(f > 0 && f < 1)) throw new Error(`${where}.evalFraction: must be in (0, 1), got ${f}`);
}

export function splitOf(id: string, seed: number, evalFraction: number): Split {
  return deriveSeed('split', seed, id) / 4294967296 < evalFraction ? 'eval' : 'train';
}

export function generatedTasks<T>(opts: {
  seed: number;
  count: number;
  evalFraction: number;
  make: (random: () => number, index: number) => { id: string; data: T };
}): GeneratedTasks<T> {
  checkFraction('tasks', opts.evalFraction);
  if (!Number.isInteger(opts.count) || opts.count < 2) throw new Error(`tasks.count: must be an integer >= 2, got ${opts.count}`);
  let cache: Task<T>[] | undefined;
  return {
    kind: 'generated',
    evalFraction: opts.evalFraction,
    all() {
      if (cache) return cache;
      const seen = new Set<string>();
      const tasks: Task<T>[] = [];
      for (let i = 0; i < opts.count; i++) {
        const { id, data } = opts.make(seededRandom(deriveSeed('task', opts.seed, i)), i);
        if (seen.has(id)) continue; // a generator may repeat itself; ids are unique
        seen.add(id);
        tasks.push({ id, data, split: splitOf(id, opts.seed, opts.evalFraction) });
      }
      return (cache = tasks);
    },
  };
}

export function jsonlTasks<T>(opts: { path: string; schema: z.ZodType<T>; evalFraction: number; seed?: number; idField?: string }): JsonlTasks<T> {
  checkFraction('tasks', opts.evalFraction);
  return { kind: 'jsonl', path: opts.path, schema: opts.schema, evalFraction: opts.evalFraction, seed: opts.seed ?? 0, idField: opts.idField ?? 'id' };
}

/** Parses JSONL text into tasks; errors name the line and the field. */
export function parseJsonlTasks<T>(source: JsonlTasks<T>, text: string): Task<T>[] {
  const tasks: Task<T>[] = [];
  const seen = new Set<string>();
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (e) {
      throw new Error(`${source.path}:${i + 1}: not JSON (${(e as Error).message})`);
    }
    const parsed = source.schema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new Error(`${source.path}:${i + 1}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    }
    const id = String((raw as Record<string, unknown>)[source.idField] ?? i + 1);
    if (seen.has(id)) throw new Error(`${source.path}:${i + 1}: ${source.idField}: duplicate id ${JSON.stringify(id)}`);
    seen.add(id);
    tasks.push({ id, data: parsed.data, split: splitOf(id, source.seed, source.evalFraction) });
  });
  return tasks;
}

/**
 * The tasks of one step: `count` distinct tasks of a split, in an order fixed by
 * (run seed, step). Wraps around when the split has fewer tasks than asked.
 */
export function selectTasks<T>(all: readonly Task<T>[], split: Split, count: number, seed: number, step: number): Task<T>[] {
  const pool = all.filter((t) => t.split === split);
  if (pool.length === 0) throw new Error(`tasks: the ${split} split is empty`);
  const order = pool.map((t, i) => ({ t, key: deriveSeed('order', seed, step, t.id), i }));
  order.sort((a, b) => a.key - b.key || a.i - b.i);
  const out: Task<T>[] = [];
  for (let i = 0; i < count; i++) out.push(order[i % order.length]!.t);
  return out;
}
