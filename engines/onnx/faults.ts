/**
 * Test-only fault injection. Off unless the engine process has
 *
 *   TROUPE_ENGINE_FAULTS=<fault>:<pattern>[,<fault>:<pattern>...]
 *
 * Each fault applies to an Update whose request id contains <pattern> (with a
 * trailing `$`: ends with it). Request ids of training updates are
 * `<run>/<model>/step<N>`, and `<run>/<model>/step<N>/lr0.1` for the
 * reduced-lr retry, so `nan-update:myrun/policy/step1$` poisons only the first
 * attempt of step 1.
 *
 * `nan-update:<pattern>`: the Update runs with a NaN advantage on its first
 * trained token. Nothing else is touched: the real update graph then computes a
 * NaN loss and NaN gradients, and the engine's own non-finite guard refuses the
 * update (reason NON_FINITE_UPDATE) exactly as it would for NaN/inf produced by
 * training.
 *
 * `stall-update:<pattern>`: the Update takes the engine's train queue (its
 * device queue where there is no trainer thread) and never finishes, without
 * blocking the event loop: Health still answers, reporting the queued work and,
 * once nothing else runs, no new device runs (the hang the pool worker's
 * watchdog must catch although the engine answers). Every later Score and
 * Update waits behind it.
 *
 * The pool worker passes its environment to the engine it spawns, so setting
 * the variable for `troupe up` (or a test's pool worker) reaches the engine.
 */
import type { UpdateSample } from './model-runtime';

const KINDS = ['nan-update', 'stall-update'] as const;
type FaultKind = (typeof KINDS)[number];

export interface EngineFaults {
  /** What is armed, for the engine's log ([] when off). */
  readonly armed: string[];
  /** True when an Update with this request id is to be poisoned. */
  nanUpdate(requestId: string): boolean;
  /** True when an Update with this request id is to stall the device queue. */
  stallUpdate(requestId: string): boolean;
}

export const NO_FAULTS: EngineFaults = { armed: [], nanUpdate: () => false, stallUpdate: () => false };

/** Parses TROUPE_ENGINE_FAULTS; throws naming the bad entry. */
export function parseEngineFaults(spec: string | undefined): EngineFaults {
  if (!spec || spec.trim() === '') return NO_FAULTS;
  const patterns: Array<{ kind: FaultKind; text: string; atEnd: boolean }> = [];
  for (const entry of spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([a-z-]+):(.+)$/.exec(entry);
    if (!m || !KINDS.includes(m[1] as FaultKind))
      throw new Error(`TROUPE_ENGINE_FAULTS: unknown fault "${entry}" (known: ${KINDS.map((k) => `${k}:<request-id pattern>`).join(', ')})`);
    const atEnd = m[2]!.endsWith('$');
    patterns.push({ kind: m[1] as FaultKind, text: atEnd ? m[2]!.slice(0, -1) : m[2]!, atEnd });
  }
  const matches = (kind: FaultKind) => (id: string) => patterns.some((p) => p.kind === kind && (p.atEnd ? id.endsWith(p.text) : id.includes(p.text)));
  return {
    armed: patterns.map((p) => `${p.kind}:${p.text}${p.atEnd ? '$' : ''}`),
    nanUpdate: matches('nan-update'),
    stallUpdate: matches('stall-update'),
  };
}

/** The samples with a NaN advantage on the first trained token (the loss and every gradient then go NaN). */
export function withNanAdvantage(samples: UpdateSample[]): UpdateSample[] {
  let done = false;
  return samples.map((s) => {
    const t = done ? -1 : Array.from(s.lossMask).findIndex((m) => m === 1);
    if (t < 0) return s;
    done = true;
    const advantages = Array.from(s.advantages);
    advantages[t] = Number.NaN;
    return { ...s, advantages };
  });
}
