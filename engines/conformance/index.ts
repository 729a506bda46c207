/**
 * The protocol v2 conformance suite: runs the checks of checks/ against the
 * engine at `address`, over a raw gRPC client, and says for each whether the
 * engine passed, failed (observed vs expected) or was skipped (and why).
 *
 *   const { results } = await runConformance('127.0.0.1:50051');
 *   results.filter((r) => r.status === 'fail')
 *
 * The CLI is `troupe engine-check <host:port>` (cli/commands/engine-check.ts);
 * README.md here lists the checks.
 */
import type * as P from '../protocol/proto';
import { CHECKS, type Check } from './checks';
import { Context, Fail, Skip, type Spec } from './context';
import { describeError, WireClient } from './wire-client';

export { CHECKS, type Check } from './checks';
export { TRANSFORMER_TEST_SPEC, TINY_LM_TEST_SPEC } from './context';

export type CheckStatus = 'pass' | 'fail' | 'skip';

export interface CheckResult {
  id: string;
  title: string;
  status: CheckStatus;
  /** pass: what was measured; fail: observed vs expected; skip: why */
  detail: string;
  ms: number;
}

export interface ConformanceOptions {
  /** Hears one line per check as it finishes (formatResult). */
  log?: (line: string) => void;
  /** Run only these check ids (or id prefixes ending in ".", e.g. "update."). */
  only?: string[];
  /** Report these (ids or prefixes) as SKIP without running them, e.g. a known failure being fixed elsewhere. */
  skip?: string[];
  /** Model spec for the checks (default: transformer's test spec, or tiny-lm's). */
  spec?: Spec;
  /** A directory the engine reads and writes at the same path, for the by-reference checks (default: the OS temp dir; the engine must share it). */
  sharedDir?: string;
  /** Give up connecting after this long (default 10 s). */
  connectTimeoutMs?: number;
  /** Longest a single check may take (default 60 s). */
  checkTimeoutMs?: number;
}

export interface ConformanceReport {
  address: string;
  results: CheckResult[];
  /** Health.capabilities, null when the engine sent none (or Health failed). */
  capabilities: P.Capabilities | null;
  counts: Record<CheckStatus, number>;
  ms: number;
}

export class EngineUnreachableError extends Error {
  override name = 'EngineUnreachableError';
}

const matches = (pattern: string, id: string) => id === pattern || (pattern.endsWith('.') && id.startsWith(pattern));

/** Checks selected by `only` (unknown ids are an error, so a typo does not pass silently). */
export function selectChecks(only?: string[]): Check[] {
  if (!only || only.length === 0) return CHECKS;
  checkIds(only);
  return CHECKS.filter((c) => only.some((o) => matches(o, c.id)));
}

/** Throws naming the ids (or prefixes) that match no check. */
export function checkIds(ids: string[]): void {
  const unknown = ids.filter((o) => !CHECKS.some((c) => matches(o, c.id)));
  if (unknown.length) throw new Error(`unknown check id(s): ${unknown.join(', ')} (known: ${CHECKS.map((c) => c.id).join(', ')})`);
}

export function formatResult(r: CheckResult): string {
  return `${r.status.toUpperCase()} ${r.id}${r.detail ? `: ${r.detail}` : ''}`;
}

export function formatSummary(rep: ConformanceReport): string {
  const c = rep.counts;
  return `engine-check ${rep.address}: ${c.pass} passed, ${c.fail} failed, ${c.skip} skipped (${rep.results.length} checks, ${(rep.ms / 1000).toFixed(1)} s)`;
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Fail(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]);
}

async function runCheck(ctx: Context, check: Check, timeoutMs: number): Promise<CheckResult> {
  const t0 = performance.now();
  let status: CheckStatus;
  let detail: string;
  try {
    detail = (await withTimeout(check.run(ctx), timeoutMs, check.id)) ?? '';
    status = 'pass';
  } catch (e) {
    if (e instanceof Skip) status = 'skip';
    else status = 'fail';
    detail = e instanceof Skip || e instanceof Fail ? e.message : `error: ${(e as Error)?.stack ?? String(e)}`;
  }
  return { id: check.id, title: check.title, status, detail: detail.replace(/\s*\n\s*/g, ' '), ms: Math.round(performance.now() - t0) };
}

/**
 * Runs the suite (or `only` those checks) against the engine at `address`.
 * Throws EngineUnreachableError when no engine answers Health there.
 */
export async function runConformance(address: string, opts: ConformanceOptions = {}): Promise<ConformanceReport> {
  const checks = selectChecks(opts.only);
  const skipped = opts.skip ?? [];
  checkIds(skipped);
  const t0 = performance.now();
  const client = new WireClient(address, { timeoutMs: 60_000 });
  const ctx = new Context(client, { spec: opts.spec, sharedDir: opts.sharedDir, log: opts.log });
  try {
    try {
      await client.waitForReady(opts.connectTimeoutMs ?? 10_000);
    } catch (e) {
      throw new EngineUnreachableError(`no engine reachable at ${address}: ${(e as Error).message}`);
    }
    const h = await client.unary('Health', {}, opts.connectTimeoutMs ?? 10_000);
    if (!h.ok && (h.error.codeName === 'UNAVAILABLE' || h.error.codeName === 'DEADLINE_EXCEEDED')) {
      throw new EngineUnreachableError(`no engine answers at ${address}: ${describeError(h.error)}`);
    }
    const results: CheckResult[] = [];
    let gone: string | undefined; // the engine stopped answering: the rest are not run
    for (const check of checks) {
      const r = skipped.some((p) => matches(p, check.id))
        ? { id: check.id, title: check.title, status: 'skip' as const, detail: 'skipped by request (--skip)', ms: 0 }
        : gone
          ? { id: check.id, title: check.title, status: 'fail' as const, detail: `not run: ${gone}`, ms: 0 }
          : await runCheck(ctx, check, opts.checkTimeoutMs ?? 60_000);
      results.push(r);
      opts.log?.(formatResult(r));
      if (r.status === 'fail' && !gone) {
        const alive = await client.unary('Health', {}, 10_000);
        if (!alive.ok && ['UNAVAILABLE', 'DEADLINE_EXCEEDED'].includes(alive.error.codeName))
          gone = `the engine stopped answering Health after ${check.id} (${describeError(alive.error)})`;
      }
    }
    const counts = { pass: 0, fail: 0, skip: 0 };
    for (const r of results) counts[r.status]++;
    const capabilities = h.ok ? (h.value.capabilities ?? null) : null;
    return { address, results, capabilities, counts, ms: Math.round(performance.now() - t0) };
  } finally {
    ctx.cleanup();
    client.close();
  }
}

/** The failed checks of a report, one line each (empty when conformant). */
export function failures(rep: ConformanceReport): string[] {
  return rep.results.filter((r) => r.status === 'fail').map(formatResult);
}

/**
 * Runs the suite against `address` and throws (an Error listing every failed
 * check) unless none failed: the one-liner for an engine's own test, e.g.
 * `await assertConformant(engine.address)`. Returns the report.
 */
export async function assertConformant(address: string, opts: ConformanceOptions = {}): Promise<ConformanceReport> {
  const rep = await runConformance(address, opts);
  const failed = failures(rep);
  if (failed.length) throw new Error(`${formatSummary(rep)}\n${failed.join('\n')}`);
  return rep;
}
