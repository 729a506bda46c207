/**
 * Version-0 weights by content: a seeded θ₀ by (spec key, seed), a LoRA base over a checkpoint by (directory,
 * spec key). One Float32Array however many models and adapters use it, held weakly here: it stays while a
 * version or a LoRA runtime holds it (a version 0 the cache evicts, with no adapter over it, goes). Versions are
 * immutable, so nothing writes into a shared array.
 */
export class SharedWeights {
  private readonly held = new Map<string, WeakRef<Float32Array>>();
  private readonly gone = new FinalizationRegistry<string>((key) => {
    if (this.held.get(key)?.deref() === undefined) this.held.delete(key);
  });

  /** The array under `key`, made by `make` when none is held. */
  get(key: string, make: () => Float32Array): Float32Array {
    const have = this.held.get(key)?.deref();
    if (have) return have;
    const theta = make();
    this.held.set(key, new WeakRef(theta));
    this.gone.register(theta, key);
    return theta;
  }

  /** Keys of the arrays still held (Stats, tests). */
  keys(): string[] {
    return [...this.held].filter(([, r]) => r.deref() !== undefined).map(([k]) => k);
  }
}

/** The key of a seeded θ₀. */
export const seededKey = (specKey: string, seed: unknown): string => JSON.stringify(['seed', specKey, String(seed)]);

/** The key of a checkpoint directory's θ read as the spec `specKey`. */
export const checkpointKey = (dir: string, specKey: string): string => JSON.stringify(['checkpoint', dir, specKey]);
