/**
 * Test-only fault injection. Off unless the engine process has
 *
 *   TROUPE_ENGINE_FAULTS=nan-update:<pattern>[,nan-update:<pattern>...]
 *
 * `nan-update:<pattern>`: an Update whose request id contains <pattern> (with a
 * trailing `$`: ends with it) runs with a NaN advantage on its first trained
 * token. Nothing else is touched: the real update graph then computes a NaN
 * loss and NaN gradients, and the engine's own non-finite guard refuses the
 * update (reason NON_FINITE_UPDATE) exactly as it would for NaN/inf produced
 * by training. Request ids of training updates are `<run>/<model>/step<N>`,
 * and `<run>/<model>/step<N>/lr0.1` for the reduced-lr retry, so
 * `nan-update:myrun/policy/step1$` poisons only the first attempt of step 1.
 *
 * The pool worker passes its environment to the engine it spawns, so setting
 * the variable for `troupe up` (or a test's pool worker) reaches the engine.
 */
import type { UpdateSample } from '../model-runtime';

export interface EngineFaults {
  /** What is armed, for the engine's log ([] when off). */
  readonly armed: string[];
  /** True when an Update with this request id is to be poisoned. */
  nanUpdate(requestId: string): boolean;
}

export const NO_FAULTS: EngineFaults = { armed: [], nanUpdate: () => false };

/** Parses TROUPE_ENGINE_FAULTS; throws naming the bad entry. */
export function parseEngineFaults(spec: string | undefined): EngineFaults {
  if (!spec || spec.trim() === '') return NO_FAULTS;
  const patterns: Array<{ text: string; atEnd: boolean }> = [];
  for (const entry of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^nan-update:(.+)$/.exec(entry);
    if (!m) throw new Error(`TROUPE_ENGINE_FAULTS: unknown fault "${entry}" (known: nan-update:<request-id pattern>)`);
    const atEnd = m[1]!.endsWith('$');
    patterns.push({ text: atEnd ? m[1]!.slice(0, -1) : m[1]!, atEnd });
  }
  return {
    armed: patterns.map((p) => `nan-update:${p.text}${p.atEnd ? '$' : ''}`),
    nanUpdate: (id) => patterns.some((p) => (p.atEnd ? id.endsWith(p.text) : id.includes(p.text))),
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
