/**
 * Abort: of an unknown request, of a running and of a queued Generate.
 */
import * as P from '../../protocol/proto';
import { type Check, expect, ok } from '../context';
import { type GenReq, sleep, generate, generateOk, sequenceProblems, firstDifference, contexts } from './fixtures';

/** abort.generate: an Abort sent this long after the Generate it names finds it, if the engine is reading its messages at all. */
const QUEUED_ABORT_AFTER_MS = 20;
/** Sequences of each abort.generate call: enough to keep an engine busy for a while. */
const ABORT_BATCH = 512;

export const ABORT_CHECKS: Check[] = [
  {
    id: 'abort.unknown',
    title: 'Abort of an unknown request id, and of every Generate of a model with none in flight: 0 aborted, no error',
    async run(ctx) {
      await ctx.requireRpcs('Abort');
      const base = await ctx.base();
      const r = ok(await ctx.client.unary('Abort', { modelKey: base.key, requestIds: [ctx.key('no-such-request')] }), 'Abort');
      expect(r.abortedRequests === 0, `aborted_requests ${r.abortedRequests}, expected 0`);
      // every Generate of the suite's own model (never Abort {}: the engine may be serving others)
      const all = ok(await ctx.client.unary('Abort', { modelKey: base.key, requestIds: [] }), 'Abort of every Generate of the base model');
      expect(all.abortedRequests === 0, `Abort of every Generate of the base model with none in flight: aborted_requests ${all.abortedRequests}, expected 0`);
    },
  },
  {
    id: 'abort.generate',
    title:
      'Abort of a running and of a queued Generate: each returns successfully, each sequence finished or ABORTED (logprobs as many as tokens); aborted_requests 0 or 1; an Abort sent well after the queued one (another model) finds it while it waits; later Generates unaffected',
    async run(ctx) {
      await ctx.requireRpcs('Abort', 'Generate');
      const base = await ctx.base();
      const caps = await ctx.capabilities();
      const V = await ctx.vocab();
      const reference: GenReq = {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 9 },
        sequences: contexts(V).map((c, i) => ({ context: c, seed: String(700 + i) })),
      };
      const before = await generateOk(ctx, reference, 'reference Generate');
      // B is on another model: no engine can have put it into A's device run, so while A still runs, B waits and must be aborted
      const other = await ctx.initModel('abort-other');
      const big = (id: string, seed: number, key = base.key): GenReq => ({
        modelKey: key,
        version: '0',
        requestId: id,
        sampling: { temperature: 1, maxTokens: 30 },
        sequences: Array.from({ length: ABORT_BATCH }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: String(seed + i) })),
      });
      // A starts on the device; B, sent 3 ms later, waits behind it; then both are aborted
      const a = big(ctx.key('abort-running'), 1000);
      const b = big(ctx.key('abort-queued'), 2000, other.key);
      let aDone = false;
      const pa = generate(ctx, a).finally(() => (aDone = true));
      await sleep(3);
      let bDone = false;
      const bSent = Date.now();
      const pb = generate(ctx, b).finally(() => (bDone = true));
      await sleep(2);
      const abort = async (r: GenReq) => ok(await ctx.client.unary('Abort', { modelKey: r.modelKey, requestIds: [r.requestId!] }), `Abort ${r.requestId}`);
      // B's Abort is repeated (every 2 ms) until it lands or B returns: an Abort may reach the engine before the Generate it names.
      // A miss is a fault only on the engine's own evidence, never on reply timing (A's large reply can arrive after a later
      // small one): the Abort was sent well after B, and the Health that follows it, with A's reply not yet here, reports
      // queue_depth ≥ 2 (A running, B still waiting). B was then waiting when the engine read the Abort, which came after it.
      // An engine that blocks while it runs A answers both only after A, when B is on the device (not abortable): no fault.
      let mustHaveFound = false;
      const abortB = async () => {
        let total = 0;
        for (let i = 0; i < 2000 && !bDone && total === 0; i++) {
          const sentLate = Date.now() - bSent >= QUEUED_ABORT_AFTER_MS;
          total += (await abort(b)).abortedRequests;
          if (total === 0 && sentLate && !aDone && !bDone) {
            const health = ok(await ctx.client.unary('Health', {}), 'Health');
            if (!aDone && !bDone && health.queueDepth >= 2) mustHaveFound = true;
          }
          if (total === 0) await sleep(2);
        }
        return { abortedRequests: total };
      };
      const [abA, abB] = await Promise.all([abort(a), abortB()]);
      const [ra, rb] = await Promise.all([pa, pb]);
      expect(
        !mustHaveFound,
        `an Abort of the queued Generate (another model), sent ${QUEUED_ABORT_AFTER_MS}+ ms after it, did not find it (aborted_requests 0) though the engine then reported it still waiting behind the first (Health queue_depth ≥ 2)`,
      );
      const outcome: string[] = [];
      for (const [name, req, ab, res] of [
        ['running', a, abA!, ra],
        ['queued', b, abB!, rb],
      ] as const) {
        expect(ab.abortedRequests === 0 || ab.abortedRequests === 1, `Abort of the ${name} Generate: aborted_requests ${ab.abortedRequests}, expected 0 or 1`);
        const out = ok(res, `the ${name} Generate after its Abort`);
        const problems = sequenceProblems(req, out, V, true);
        expect(problems.length === 0, `the ${name} Generate after its Abort: ${problems.slice(0, 2).join('; ')}`);
        const aborted = out.sequences.filter((s) => s.stopReason === 'ABORTED');
        if (ab.abortedRequests === 0)
          expect(aborted.length === 0, `Abort of the ${name} Generate said 0 aborted, yet ${aborted.length} sequences came back ABORTED`);
        outcome.push(
          `${name}: aborted_requests ${ab.abortedRequests}, ${aborted.length}/${ABORT_BATCH} ABORTED (${aborted.reduce((n, s) => n + s.tokens.length, 0)} tokens kept)`,
        );
      }
      const again = await generateOk(ctx, { ...b, sequences: b.sequences.slice(0, 8) }, 'Generate with the aborted request_id again');
      expect(!again.sequences.some((s) => s.stopReason === 'ABORTED'), 'a later Generate with the same request_id came back ABORTED');
      if (caps.deterministic) {
        // what an aborted sequence kept is a prefix of the same sequence run to the end (only those are run again)
        for (const [name, req, res] of [
          ['running', a, ra],
          ['queued', b, rb],
        ] as const) {
          if (!res.ok) continue;
          const partial = res.value.sequences.flatMap((s, i) => (s.stopReason === 'ABORTED' && s.tokens.length > 0 ? [i] : []));
          if (partial.length === 0) continue;
          const full = await generateOk(
            ctx,
            { ...req, requestId: '', sequences: partial.map((i) => req.sequences[i]!) },
            `the ${name} Generate's partial sequences again`,
          );
          partial.forEach((i, k) => {
            const s = res.value.sequences[i]!;
            const f = full.sequences[k]!;
            const n = s.tokens.length;
            const d = firstDifference(
              [s],
              [
                {
                  ...f,
                  tokens: f.tokens.slice(0, n),
                  logprobs: f.logprobs.slice(0, n),
                  sampleLogprobs: f.sampleLogprobs.slice(0, n),
                  stopReason: P.StopReason.ABORTED,
                },
              ],
            );
            expect(!d, `the ${name} Generate's sequences[${i}] (ABORTED after ${n} tokens) is not a prefix of the same sequence run to the end: ${d}`);
          });
        }
      }
      const after = await generateOk(ctx, reference, 'the reference Generate after the Abort');
      if (caps.deterministic) {
        const d = firstDifference(before.sequences, after.sequences);
        expect(!d, `the reference Generate differs after the Abort: ${d}`);
      }
      return outcome.join('; ');
    },
  },
];
