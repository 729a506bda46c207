/**
 * Generate: shape, max_tokens, stop tokens, greedy, determinism, sampling and
 * its log-probs, top_p, batches over the maximum.
 */
import { type Check, expect, ok, Skip } from '../context';
import { type GenReq, type Sampling, type Seq, MAX_U64, fmt, generateOk, firstDifference, contexts } from './fixtures';

export const GENERATE_CHECKS: Check[] = [
  {
    id: 'generate.shape',
    title: 'Generate: per sequence ≤ max_tokens tokens < vocab, logprobs/sample_logprobs as many and ≤ 0, version == requested, stop_reason right',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const [c0, c1, c2, c3] = contexts(await ctx.vocab());
      const req: GenReq = {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 8 },
        sequences: [
          { context: c0!, seed: '11' },
          { context: c1!, seed: '12', sampling: { temperature: 0.7, topK: 5, maxTokens: 6, stopTokens: [3, 7] } },
          { context: c2!, seed: MAX_U64, sampling: { temperature: 1.3, topP: 0.9, maxTokens: 10, stopTokens: [0] } },
          { context: c3!, seed: '0', sampling: { temperature: 1, maxTokens: 12, stopTokens: [1, 2, 4, 5, 6, 8] } },
        ],
      };
      const res = await generateOk(ctx, req);
      return res.sequences.map((s) => `${s.tokens.length} ${s.stopReason}`).join(', ');
    },
  },
  {
    id: 'generate.max-tokens',
    title: 'Generate without stop tokens runs to max_tokens: MAX_TOKENS',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const res = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 7 },
        sequences: cs.map((c, i) => ({ context: c, seed: String(20 + i) })),
      });
      const wrong = res.sequences.findIndex((s) => s.tokens.length !== 7 || s.stopReason !== 'MAX_TOKENS');
      expect(wrong < 0, `sequences[${wrong}]: ${res.sequences[wrong]?.tokens.length} tokens ${res.sequences[wrong]?.stopReason}, expected 7 MAX_TOKENS`);
    },
  },
  {
    id: 'generate.stop-token',
    title: 'Generate with every id a stop token stops after one token: STOP_TOKEN',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const all = Array.from({ length: V }, (_, i) => i);
      const res = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 5, stopTokens: all },
        sequences: contexts(V).map((c, i) => ({ context: c, seed: String(30 + i) })),
      });
      const wrong = res.sequences.findIndex((s) => s.tokens.length !== 1 || s.stopReason !== 'STOP_TOKEN');
      expect(wrong < 0, `sequences[${wrong}]: ${res.sequences[wrong]?.tokens.length} tokens ${res.sequences[wrong]?.stopReason}, expected 1 STOP_TOKEN`);
    },
  },
  {
    id: 'generate.greedy',
    title: 'Generate at temperature 0: sample_logprobs all 0, and the same tokens for any seed',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const req = (seed: number): GenReq => ({
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 0, maxTokens: 8 },
        sequences: cs.map((c, i) => ({ context: c, seed: String(seed + i) })),
      });
      const a = await generateOk(ctx, req(40));
      const nonzero = a.sequences.findIndex((s) => s.sampleLogprobs.some((x) => x !== 0));
      expect(nonzero < 0, `sequences[${nonzero}].sample_logprobs [${a.sequences[nonzero]?.sampleLogprobs.map(fmt)}], expected all 0`);
      const b = await generateOk(ctx, req(90));
      const i = a.sequences.findIndex((s, k) => s.tokens.join() !== b.sequences[k]!.tokens.join());
      expect(i < 0, `greedy sequences[${i}] differs between seeds: [${a.sequences[i]?.tokens}] vs [${b.sequences[i]?.tokens}]`);
    },
  },
  {
    id: 'generate.deterministic',
    title: 'Generate: the same (context, seed, sampling) gives the same tokens and log-prob bits: twice, inside a mixed batch, and in concurrent calls',
    async run(ctx) {
      await ctx.requireDeterministic();
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const [c0, c1, c2, c3] = contexts(await ctx.vocab());
      const seq: Seq = { context: c0!, seed: '77', sampling: { temperature: 1, maxTokens: 10 } };
      const seq2: Seq = { context: c3!, seed: '78', sampling: { temperature: 0.8, topK: 6, topP: 0.95, maxTokens: 7 } };
      const one = (sequences: Seq[]): GenReq => ({ modelKey: base.key, version: '0', sampling: undefined, sequences });
      const a = await generateOk(ctx, one([seq, seq2]));
      const b = await generateOk(ctx, one([seq, seq2]));
      let d = firstDifference(a.sequences, b.sequences);
      expect(!d, `two identical calls differ: ${d}`);
      const mixed = await generateOk(
        ctx,
        one([
          { context: c1!, seed: '5', sampling: { temperature: 1, maxTokens: 3 } },
          seq,
          { context: c2!, seed: '6', sampling: { temperature: 0, maxTokens: 12 } },
          { context: c0!, seed: '78', sampling: { temperature: 1, maxTokens: 10 } },
          seq2,
        ]),
      );
      d = firstDifference(a.sequences, [mixed.sequences[1]!, mixed.sequences[4]!]);
      expect(!d, `inside a mixed batch: ${d}`);
      const concurrent = await Promise.all([
        generateOk(ctx, one([{ context: c2!, seed: '9', sampling: { temperature: 1, maxTokens: 11 } }])),
        generateOk(ctx, one([seq])),
        generateOk(ctx, one([{ context: c1!, seed: '8', sampling: { temperature: 1.5, maxTokens: 2 } }, seq2])),
      ]);
      d = firstDifference(a.sequences, [concurrent[1].sequences[0]!, concurrent[2].sequences[1]!]);
      expect(!d, `in concurrent calls: ${d}`);
    },
  },

  {
    id: 'generate.sampling',
    title:
      'Sampling semantics: top_k 1 and a tiny top_p draw the greedy tokens (sample_logprobs 0); at temperature 1 without top-k/top-p sample_logprobs = logprobs; top_k ≥ V = off',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const run = (sampling: Sampling) =>
        generateOk(
          ctx,
          { modelKey: base.key, version: '0', sampling: { maxTokens: 6, ...sampling }, sequences: cs.map((c, i) => ({ context: c, seed: String(300 + i) })) },
          `Generate ${JSON.stringify(sampling)}`,
        );
      const greedy = await run({ temperature: 0 });
      for (const sampling of [
        { temperature: 1, topK: 1 },
        { temperature: 1, topP: 0.001 },
      ]) {
        const r = await run(sampling);
        const i = r.sequences.findIndex((s, k) => s.tokens.join() !== greedy.sequences[k]!.tokens.join() || s.sampleLogprobs.some((x) => x !== 0));
        expect(
          i < 0,
          `${JSON.stringify(sampling)}: sequences[${i}] tokens [${r.sequences[i]?.tokens}] sample_logprobs [${r.sequences[i]?.sampleLogprobs.map(fmt)}], expected the greedy [${greedy.sequences[i]?.tokens}] with 0s`,
        );
      }
      const plain = await run({ temperature: 1 });
      const tol = caps.scoreMatchesGenerate === 'tolerance' ? caps.scoreTolerance : 0;
      let max = 0;
      for (const s of plain.sequences) s.logprobs.forEach((x, k) => (max = Math.max(max, Math.abs(x - s.sampleLogprobs[k]!))));
      expect(max <= Math.max(tol, 1e-6), `temperature 1, no top-k/top-p: max |sample_logprobs − logprobs| ${fmt(max)}`);
      if (caps.deterministic) {
        const allK = await run({ temperature: 1, topK: V + 5 });
        const d = firstDifference(plain.sequences, allK.sequences);
        expect(!d, `top_k ${V + 5} (≥ V) differs from no top_k: ${d}`);
      }
    },
  },
  {
    id: 'generate.sample-logprobs',
    title:
      'With temperature, top_k and top_p, each drawn token is in the kept set and sample_logprobs is its log-prob renormalized over that set (full distribution from Score)',
    async run(ctx) {
      await ctx.requireRpcs('Generate', 'Score');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const samplings: Sampling[] = [
        { temperature: 0.7, topK: 5, maxTokens: 4 },
        { temperature: 1.3, topP: 0.7, maxTokens: 4 },
        { temperature: 0.9, topK: 8, topP: 0.9, maxTokens: 4 },
      ];
      const gen = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: undefined,
        sequences: samplings.map((sp, i) => ({ context: cs[i]!, seed: String(340 + i), sampling: sp })),
      });
      // every candidate token at every position: log p(v | prefix)
      const rows: { seq: number; t: number }[] = [];
      const scoreSeqs: { context: number[]; tokens: number[] }[] = [];
      gen.sequences.forEach((g, i) =>
        g.tokens.forEach((_, t) => {
          rows.push({ seq: i, t });
          for (let v = 0; v < V; v++) scoreSeqs.push({ context: [...cs[i]!, ...g.tokens.slice(0, t)], tokens: [v] });
        }),
      );
      const sc = ok(await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: scoreSeqs }), `Score of ${scoreSeqs.length} candidates`);
      const problems: string[] = [];
      let maxErr = 0;
      rows.forEach(({ seq, t }, r) => {
        const sp = samplings[seq]!;
        const T = sp.temperature!;
        const logp = Array.from({ length: V }, (_, v) => sc.sequences[r * V + v]!.logprobs[0]!);
        const scaled = logp.map((x) => x / T);
        const m = Math.max(...scaled);
        const q = scaled.map((x) => Math.exp(x - m));
        const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => q[b]! - q[a]! || a - b);
        const k = sp.topK && sp.topK < V ? sp.topK : V;
        const kept = order.slice(0, k);
        const massK = kept.reduce((a, v) => a + q[v]!, 0);
        const p = sp.topP && sp.topP < 1 ? sp.topP : 2;
        let cum = 0;
        const nucleus: number[] = [];
        const boundary = new Set<number>(); // ranks within float noise of the top-p cut
        for (const v of kept) {
          if (cum < p * massK) nucleus.push(v);
          if (Math.abs(cum - p * massK) < 1e-5 * massK) boundary.add(v);
          cum += q[v]!;
        }
        const tok = gen.sequences[seq]!.tokens[t]!;
        const at = `sequences[${seq}] token ${t}`;
        if (!nucleus.includes(tok) && !boundary.has(tok)) {
          problems.push(`${at}: ${tok} (rank ${order.indexOf(tok)}) outside the kept set [${nucleus}] of ${JSON.stringify(sp)}`);
          return;
        }
        const set = nucleus.includes(tok) ? nucleus : [...nucleus, tok];
        const expected = Math.log(q[tok]! / set.reduce((a, v) => a + q[v]!, 0));
        const err = Math.abs(expected - gen.sequences[seq]!.sampleLogprobs[t]!);
        maxErr = Math.max(maxErr, err);
        if (!(err <= 1e-4))
          problems.push(
            `${at}: sample_logprob ${fmt(gen.sequences[seq]!.sampleLogprobs[t]!)}, expected ${fmt(expected)} (renormalized over ${set.length} kept tokens)`,
          );
      });
      expect(problems.length === 0, problems.slice(0, 3).join('; '));
      return `${rows.length} tokens, max |Δ| ${fmt(maxErr)}`;
    },
  },
  {
    id: 'generate.top-p-range',
    title: 'top_p 0 and 1 are off (same bits as without top_p); outside [0, 1] (1.5, −0.1) → INVALID_REQUEST',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const req = (sampling: Sampling): GenReq => ({
        modelKey: base.key,
        version: '0',
        sampling: { temperature: 1, maxTokens: 6, ...sampling },
        sequences: cs.map((c, i) => ({ context: c, seed: String(320 + i) })),
      });
      const plain = await generateOk(ctx, req({}));
      for (const topP of [1, 0]) {
        const off = await generateOk(ctx, req({ topP }), `Generate with top_p ${topP}`);
        if ((await ctx.capabilities()).deterministic) {
          const d = firstDifference(plain.sequences, off.sequences);
          expect(!d, `top_p ${topP} differs from no top_p: ${d}`);
        }
      }
      for (const topP of [1.5, -0.1]) {
        const e = await ctx.expectError(
          `Generate with top_p ${topP}`,
          () => ctx.client.unary('Generate', req({ topP })),
          'INVALID_ARGUMENT',
          'INVALID_REQUEST',
        );
        expect(/top_p/.test(e.message), `message ${JSON.stringify(e.message)} does not name top_p`);
      }
    },
  },
  {
    id: 'generate.over-max-batch',
    title: 'A Generate of max_batch + 1 sequences is served whole (split into device runs), the last one as when sent alone (deterministic engines)',
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const caps = await ctx.capabilities();
      if (!(caps.maxBatch >= 1)) throw new Skip('capabilities.max_batch is 0 (no fixed limit)');
      if (caps.maxBatch > 2048) throw new Skip(`max_batch ${caps.maxBatch}: too many sequences for a quick check`);
      const base = await ctx.base();
      const V = await ctx.vocab();
      const n = caps.maxBatch + 1;
      const seqs: Seq[] = Array.from({ length: n }, (_, i) => ({ context: [1 + (i % (V - 1))], seed: String(5000 + i) }));
      const res = await generateOk(
        ctx,
        { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 2 }, sequences: seqs },
        `Generate of ${n} sequences`,
      );
      if (caps.deterministic) {
        const alone = await generateOk(ctx, { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 2 }, sequences: [seqs[n - 1]!] });
        const d = firstDifference([res.sequences[n - 1]!], alone.sequences);
        expect(!d, `sequence ${n - 1} of ${n} vs alone: ${d}`);
      }
      return `${n} sequences`;
    },
  },
];
