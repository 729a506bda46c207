/**
 * What the checks share: the wire client, the engine's capabilities, the test
 * model spec, and fixtures (models and results several checks build on),
 * each made once on first use so any subset of checks (`only`) can run alone.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type * as P from '../protocol/proto';
import type { DeepPartial } from '../protocol/proto';
import { describeError, type Outcome, type WireClient, type WireError } from './wire-client';

/** One check of the suite: checks/ holds them, one file per area. */
export interface Check {
  id: string;
  /** What it checks, one line. */
  title: string;
  /** Resolves with a short detail on pass; throws Fail or Skip. */
  run(ctx: Context): Promise<string | void>;
}

/** Thrown by a check (or a fixture it uses) that does not apply to this engine. */
export class Skip extends Error {
  override name = 'Skip';
}

/** Thrown by a check that found the engine non-conformant: the message is observed vs expected. */
export class Fail extends Error {
  override name = 'Fail';
}

export function expect(cond: unknown, message: string): asserts cond {
  if (!cond) throw new Fail(message);
}

export const sha256Hex = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
export const HEX64 = /^[0-9a-f]{64}$/;

/** The value of an outcome; a wire error fails the check, naming what was called. */
export function ok<T>(o: Outcome<T>, what: string): T {
  if (!o.ok) throw new Fail(`${what}: ${describeError(o.error)}`);
  return o.value;
}

/** A model spec as the suite sends it (fields left out are proto3 defaults). */
export type Spec = DeepPartial<P.ModelSpec>;

/** Transformer spec of the suite (vocab 16, 2 layers of width 32, maxSeq 32). */
export const TRANSFORMER_TEST_SPEC: Spec = {
  family: 'transformer',
  vocabSize: 16,
  configJson: JSON.stringify({ width: 32, layers: 2, heads: 4, kvHeads: 2, maxSeq: 32, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu' }),
};

export const TINY_LM_TEST_SPEC: Spec = {
  family: 'tiny-lm',
  vocabSize: 16,
  configJson: JSON.stringify({ contextWindow: 4, embedDim: 8, hiddenDim: 16 }),
};

/** The test seed of the base model. */
export const BASE_SEED = '1234';

export interface Model {
  key: string;
  info: P.VersionInfo;
  /** version 0's bytes, from ExportVersion */
  weights: Buffer;
  optimizerState: Buffer;
}

export interface UpdateFixture {
  key: string;
  base: Model;
  request: P.UpdateRequest;
  response: P.UpdateResponse;
}

export interface ContextOptions {
  /** The model spec the checks use (default: the transformer test spec, or tiny-lm's): any family the engine lists; its sequences must allow context + tokens of 32. */
  spec?: Spec;
  /** A directory the engine can read and write at the same path (weights by reference); default the OS temp dir. */
  sharedDir?: string;
  log?: (line: string) => void;
}

export class Context {
  readonly runId = randomBytes(4).toString('hex');
  readonly log: (line: string) => void;
  private readonly memo = new Map<string, Promise<unknown>>();
  private tmp: string | undefined;

  constructor(
    readonly client: WireClient,
    readonly opts: ContextOptions = {},
  ) {
    this.log = opts.log ?? (() => undefined);
  }

  key(name: string): string {
    return `conformance-${this.runId}-${name}`;
  }

  /** A fixture made once (a failure is remembered too: every check that needs it reports it). */
  once<T>(name: string, make: () => Promise<T>): Promise<T> {
    let p = this.memo.get(name) as Promise<T> | undefined;
    if (!p) {
      p = make();
      p.catch(() => undefined);
      this.memo.set(name, p);
    }
    return p;
  }

  /** A directory of this run under the shared dir (removed by cleanup). */
  tmpDir(): string {
    if (!this.tmp) this.tmp = fs.mkdtempSync(path.join(this.opts.sharedDir ?? os.tmpdir(), `troupe-conformance-${this.runId}-`));
    return this.tmp;
  }

  cleanup(): void {
    if (this.tmp) fs.rmSync(this.tmp, { recursive: true, force: true });
  }

  health(): Promise<P.HealthResponse> {
    return this.once('health', async () => {
      const o = await this.client.unary('Health', {});
      if (!o.ok && o.error.codeName === 'UNIMPLEMENTED') {
        throw new Fail(
          `Health: UNIMPLEMENTED: the server does not serve troupe.engine.v2.Engine (a protocol v1 engine serves troupe.engine.v1; every check needs Health)`,
        );
      }
      return ok(o, 'Health');
    });
  }

  async capabilities(): Promise<P.Capabilities> {
    const h = await this.health();
    if (!h.capabilities) throw new Skip('Health has no capabilities');
    return h.capabilities;
  }

  /** Skips unless the engine lists every one of `rpcs` in capabilities.rpcs. */
  async requireRpcs(...rpcs: string[]): Promise<void> {
    const caps = await this.capabilities();
    const missing = rpcs.filter((r) => !caps.rpcs.includes(r));
    if (missing.length) throw new Skip(`the engine does not list ${missing.join(', ')} in capabilities.rpcs`);
  }

  async requireDeterministic(): Promise<void> {
    if (!(await this.capabilities()).deterministic) throw new Skip('the engine does not claim determinism (capabilities.deterministic false)');
  }

  async requireReferences(): Promise<void> {
    if (!(await this.capabilities()).weightsByReference)
      throw new Skip('the engine does not read/write weights by reference (capabilities.weights_by_reference false)');
  }

  /** The test spec: the given one, else transformer's, else tiny-lm's, whichever family the engine lists first. */
  async spec(): Promise<Spec> {
    if (this.opts.spec) return this.opts.spec;
    const fams = (await this.capabilities()).families;
    if (fams.includes('transformer')) return TRANSFORMER_TEST_SPEC;
    if (fams.includes('tiny-lm')) return TINY_LM_TEST_SPEC;
    throw new Skip(`the engine lists neither "transformer" nor "tiny-lm" (families: ${fams.join(', ') || 'none'}); pass a spec of its family`);
  }

  async vocab(): Promise<number> {
    return (await this.spec()).vocabSize ?? 0;
  }

  /** InitModel + ExportVersion of version 0 under `name`. */
  async initModel(name: string, seed = BASE_SEED): Promise<Model> {
    await this.requireRpcs('InitModel', 'ExportVersion');
    const key = this.key(name);
    const info = ok(await this.client.unary('InitModel', { modelKey: key, spec: await this.spec(), seed }), `InitModel ${key}`);
    const ex = ok(await this.client.unary('ExportVersion', { modelKey: key, version: '0' }), `ExportVersion ${key} v0`);
    return { key, info, weights: Buffer.from(ex.weights), optimizerState: Buffer.from(ex.optimizerState) };
  }

  /** The model most checks read (version 0, never updated). */
  base(): Promise<Model> {
    return this.once('base', () => this.initModel('base'));
  }

  /** weights_sha256 of an export of (key, version), or a Fail. */
  async exportedSha(key: string, version: string): Promise<string> {
    const ex = ok(await this.client.unary('ExportVersion', { modelKey: key, version }), `ExportVersion ${key} v${version}`);
    return sha256Hex(ex.weights);
  }

  /**
   * Calls `call`, which must fail with `code`/`reason`; then the engine must still
   * serve (Health) and the base model's version 0 be unchanged. Returns the error.
   */
  async expectError(what: string, call: () => Promise<Outcome<unknown>>, codeName: string, reason: string): Promise<WireError> {
    const o = await call();
    expect(!o.ok, `${what}: succeeded, expected ${codeName}/${reason}`);
    const e = (o as { error: WireError }).error;
    expect(e.codeName === codeName && e.reason === reason, `${what}: got ${describeError(e)}; expected ${codeName}/${reason}`);
    await this.stillServing(what);
    return e;
  }

  /** After an error: Health answers SERVING and the base model's version 0 exports with the same sha. */
  async stillServing(after: string): Promise<void> {
    const h = await this.client.unary('Health', {});
    expect(h.ok && h.value.status === 'SERVING', `after ${after}: Health ${h.ok ? `status ${h.value.status}` : describeError(h.error)}, expected SERVING`);
    const base = await this.base();
    const sha = await this.exportedSha(base.key, '0');
    expect(
      sha === base.info.weightsSha256,
      `after ${after}: base version 0 now exports with sha ${sha.slice(0, 12)}…, was ${base.info.weightsSha256.slice(0, 12)}…`,
    );
  }
}
