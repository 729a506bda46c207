/**
 * The engine's cache of model versions. The store (Postgres) is the source of
 * truth; this holds what was initialized, loaded or produced here, evicting
 * least-recently-used versions beyond a per-model cap (never the latest), and
 * whole models beyond a cap on models once nothing has used them for a while
 * (the models of ended runs: a pool worker serves run after run). A model
 * dropped and asked for again is loaded from the store, as after a restart.
 * Versions are immutable: re-putting a version with different bytes is refused.
 */
import { ErrorReason, EngineFault } from '../protocol/errors';
import { specKey } from '../families';
import type { ModelSpec } from '../families/model-family';
import type { ModelRuntime, OptimState } from './model-runtime';
import type { VersionInfo } from '../protocol/types';
import { encodeOptimizerState, encodeWeights, sha256Hex } from '../protocol/version-bytes';

export interface CachedVersion {
  version: number;
  state: OptimState;
  weightsSha256: string;
  optimizerSha256: string;
  lastUsed: number;
}

export interface ModelEntry {
  key: string;
  spec: ModelSpec;
  runtime: ModelRuntime;
  versions: Map<number, CachedVersion>;
  /** highest version number ever held here (survives eviction) */
  latest: number;
  /** when a call last used it (ms, the cache's clock) */
  usedAt: number;
  /** calls using it now (Generate, Score, Update, Export, queued or running): never dropped while > 0 */
  busy: number;
}

export interface VersionCacheOptions {
  maxVersionsPerModel: number;
  /** models held before idle ones are dropped (default 32) */
  maxModels?: number;
  /** how long a model must go unused before it may be dropped (default 10 min) */
  idleMs?: number;
  /** told of each dropped model, to drop what else is kept by its key */
  onDrop?: (key: string) => void;
  now?: () => number;
}

let clock = 0;

export class VersionCache {
  private readonly models = new Map<string, ModelEntry>();
  private readonly maxVersionsPerModel: number;
  private readonly maxModels: number;
  private readonly idleMs: number;
  private readonly onDrop: (key: string) => void;
  private readonly now: () => number;

  constructor(opts: VersionCacheOptions) {
    this.maxVersionsPerModel = opts.maxVersionsPerModel;
    this.maxModels = opts.maxModels ?? 32;
    this.idleMs = opts.idleMs ?? 10 * 60_000;
    this.onDrop = opts.onDrop ?? (() => undefined);
    this.now = opts.now ?? Date.now;
  }

  list(): ModelEntry[] {
    return [...this.models.values()];
  }

  find(key: string): ModelEntry | undefined {
    return this.models.get(key);
  }

  model(key: string): ModelEntry {
    const m = this.models.get(key);
    if (!m) {
      throw new EngineFault(ErrorReason.MODEL_NOT_LOADED, `model "${key}" is not loaded on this engine (InitModel or LoadVersion it first)`, { modelKey: key });
    }
    return m;
  }

  version(key: string, version: number): { model: ModelEntry; v: CachedVersion } {
    const model = this.model(key);
    const v = model.versions.get(version);
    if (!v) {
      const held = [...model.versions.keys()].sort((a, b) => a - b);
      throw new EngineFault(
        ErrorReason.VERSION_NOT_LOADED,
        `model "${key}" version ${version} is not loaded on this engine (loaded: ${held.join(', ') || 'none'}); LoadVersion it from the store and retry`,
        { modelKey: key, version },
      );
    }
    v.lastUsed = ++clock;
    model.usedAt = this.now();
    return { model, v };
  }

  /** Runs `fn` with the model marked busy, so it is not dropped meanwhile. */
  async using<T>(model: ModelEntry, fn: () => Promise<T>): Promise<T> {
    model.busy++;
    try {
      return await fn();
    } finally {
      model.busy--;
      model.usedAt = this.now();
    }
  }

  /** The entry for `key`, created with `spec` if new; refuses a different spec. */
  ensureModel(key: string, spec: ModelSpec, runtime: () => ModelRuntime): ModelEntry {
    const m = this.models.get(key);
    if (m) {
      if (specKey(m.spec) !== specKey(spec)) {
        throw new EngineFault(
          ErrorReason.VERSION_CONFLICT,
          `model "${key}" is loaded with spec ${JSON.stringify(m.spec)}, request has ${JSON.stringify(spec)}`,
          { modelKey: key },
        );
      }
      return m;
    }
    const entry: ModelEntry = { key, spec, runtime: runtime(), versions: new Map(), latest: -1, usedAt: this.now(), busy: 0 };
    this.models.set(key, entry);
    this.dropIdle(entry);
    return entry;
  }

  /** Past maxModels, drops the least recently used models that are idle (unused for idleMs, nothing in flight). */
  private dropIdle(added: ModelEntry): void {
    if (this.models.size <= this.maxModels) return;
    const now = this.now();
    const idle = [...this.models.values()].filter((m) => m !== added && m.busy === 0 && now - m.usedAt >= this.idleMs).sort((a, b) => a.usedAt - b.usedAt);
    for (const m of idle.slice(0, this.models.size - this.maxModels)) {
      this.models.delete(m.key);
      this.onDrop(m.key);
    }
  }

  /**
   * Add an immutable version. Identical bytes → returns the existing one;
   * different bytes under the same number → VERSION_CONFLICT.
   */
  put(model: ModelEntry, version: number, state: OptimState): CachedVersion {
    const weightsSha256 = sha256Hex(encodeWeights(state.theta));
    const optimizerSha256 = sha256Hex(encodeOptimizerState(state));
    const existing = model.versions.get(version);
    if (existing) {
      if (existing.weightsSha256 === weightsSha256 && existing.optimizerSha256 === optimizerSha256) return existing;
      throw new EngineFault(
        ErrorReason.VERSION_CONFLICT,
        `model "${model.key}" version ${version} already exists here with different ${
          existing.weightsSha256 === weightsSha256 ? 'optimizer state' : 'weights'
        } (versions are immutable)`,
        { modelKey: model.key, version },
      );
    }
    const v: CachedVersion = { version, state, weightsSha256, optimizerSha256, lastUsed: ++clock };
    model.versions.set(version, v);
    model.latest = Math.max(model.latest, version);
    model.usedAt = this.now();
    this.evict(model);
    return v;
  }

  private evict(model: ModelEntry): void {
    while (model.versions.size > this.maxVersionsPerModel) {
      let victim: CachedVersion | undefined;
      for (const v of model.versions.values()) {
        if (v.version === model.latest) continue;
        if (!victim || v.lastUsed < victim.lastUsed) victim = v;
      }
      if (!victim) return;
      model.versions.delete(victim.version);
    }
  }

  info(model: ModelEntry, v: CachedVersion): VersionInfo {
    return {
      modelKey: model.key,
      version: v.version,
      spec: model.spec,
      weightsSha256: v.weightsSha256,
      optimizerSha256: v.optimizerSha256,
      paramCount: model.runtime.paramCount,
      optimizerStep: v.state.step,
    };
  }
}
