/**
 * Score: shape, agreement with Generate, and a batch equal to its sequences alone.
 */
import { type Check, expect, Fail, ok } from '../context';
import { type GenReq, type Sampling, type Seq, fmt, generateOk, contexts } from './fixtures';

export const SCORE_CHECKS: Check[] = [
  {
    id: 'score.shape',
    title: 'Score: one log-prob (finite, ≤ 0) and one entropy (finite, ≥ 0, ≤ ln V) per token, version == requested',
    async run(ctx) {
      await ctx.requireRpcs('Score');
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const seqs = cs.map((c, i) => ({ context: c, tokens: Array.from({ length: 3 + i }, (_, k) => (k * 5 + i) % V) }));
      const res = ok(await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: seqs }), 'Score');
      const problems: string[] = [];
      if (String(res.version) !== '0') problems.push(`version ${res.version}, expected 0`);
      if (res.sequences.length !== seqs.length) problems.push(`${res.sequences.length} sequences for ${seqs.length}`);
      res.sequences.forEach((s, i) => {
        const n = seqs[i]!.tokens.length;
        if (s.logprobs.length !== n) problems.push(`sequences[${i}]: ${s.logprobs.length} logprobs for ${n} tokens`);
        if (s.entropy.length !== n) problems.push(`sequences[${i}]: ${s.entropy.length} entropies for ${n} tokens`);
        const lp = s.logprobs.findIndex((x) => !(Number.isFinite(x) && x <= 0));
        if (lp >= 0) problems.push(`sequences[${i}].logprobs[${lp}] = ${s.logprobs[lp]}`);
        const h = s.entropy.findIndex((x) => !(Number.isFinite(x) && x >= 0 && x <= Math.log(V) + 1e-4));
        if (h >= 0) problems.push(`sequences[${i}].entropy[${h}] = ${s.entropy[h]}, expected in [0, ln ${V}]`);
      });
      expect(problems.length === 0, problems.slice(0, 4).join('; '));
    },
  },
  {
    id: 'score.matches-generate',
    title: 'Score of generated tokens equals Generate\'s logprobs: bit for bit when "bit-identical", else within score_tolerance',
    async run(ctx) {
      await ctx.requireRpcs('Score', 'Generate');
      const caps = await ctx.capabilities();
      const base = await ctx.base();
      const cs = contexts(await ctx.vocab());
      const samplings: Sampling[] = [
        { temperature: 1, maxTokens: 12 },
        { temperature: 0.7, topK: 4, maxTokens: 10 },
        { temperature: 1.2, topP: 0.8, maxTokens: 9 },
        { temperature: 0, maxTokens: 8 },
      ];
      const gen = await generateOk(ctx, {
        modelKey: base.key,
        version: '0',
        sampling: undefined,
        sequences: cs.map((c, i) => ({ context: c, seed: String(60 + i), sampling: samplings[i] })),
      });
      const sc = ok(
        await ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences: cs.map((c, i) => ({ context: c, tokens: gen.sequences[i]!.tokens })) }),
        'Score',
      );
      let max = 0;
      let differ = 0;
      let n = 0;
      gen.sequences.forEach((g, i) => {
        const s = sc.sequences[i]!;
        if (s.logprobs.length !== g.logprobs.length)
          throw new Fail(`sequences[${i}]: Score gave ${s.logprobs.length} logprobs for ${g.logprobs.length} tokens`);
        g.logprobs.forEach((x, k) => {
          n++;
          const d = Math.abs(x - s.logprobs[k]!);
          if (!Object.is(x, s.logprobs[k])) differ++;
          if (!(d <= max)) max = Number.isNaN(d) ? NaN : d;
        });
      });
      if (caps.scoreMatchesGenerate === 'bit-identical') {
        expect(differ === 0, `${differ} of ${n} log-probs differ (max |Δ| ${fmt(max)}), capabilities say bit-identical`);
        return `bit-identical over ${n} tokens`;
      }
      expect(max <= caps.scoreTolerance, `max |Δ| ${fmt(max)} > score_tolerance ${fmt(caps.scoreTolerance)} over ${n} tokens`);
      return `max |Δ| ${fmt(max)} (tolerance ${fmt(caps.scoreTolerance)}; ${differ}/${n} not bit-equal)`;
    },
  },

  {
    id: 'batch.alone',
    title:
      'a batch equals the same sequences alone: Score, and greedy Generate (tokens and log-probs); bit for bit when deterministic, else within score_tolerance',
    async run(ctx) {
      await ctx.requireRpcs('Score', 'Generate');
      const caps = await ctx.capabilities();
      const tol = caps.deterministic ? 0 : caps.scoreMatchesGenerate === 'tolerance' ? caps.scoreTolerance : 0;
      const base = await ctx.base();
      const V = await ctx.vocab();
      const cs = contexts(V);
      const seqs = cs.map((c, i) => ({ context: c, tokens: contexts(V)[(i + 1) % cs.length]!.concat([i % V]) }));
      const score = (sequences: typeof seqs) => ctx.client.unary('Score', { modelKey: base.key, version: '0', sequences });
      const batch = ok(await score(seqs), 'Score (batch)');
      let max = 0;
      for (const [i, s] of seqs.entries()) {
        const alone = ok(await score([s]), `Score (sequence ${i} alone)`).sequences[0]!;
        alone.logprobs.forEach((x, k) => {
          const d = Math.abs(x - batch.sequences[i]!.logprobs[k]!);
          if (!(d <= max)) max = Number.isNaN(d) ? NaN : d;
        });
      }
      expect(max <= tol, `Score: max |Δ| ${fmt(max)} between a batch and its sequences alone, tolerance ${fmt(tol)}`);
      const greedy = (sequences: Seq[]): GenReq => ({ modelKey: base.key, version: '0', sampling: { temperature: 0, maxTokens: 8 }, sequences });
      const gb = await generateOk(ctx, greedy(cs.map((c, i) => ({ context: c, seed: String(i) }))));
      let gmax = 0;
      for (const [i, c] of cs.entries()) {
        const alone = (await generateOk(ctx, greedy([{ context: c, seed: String(i) }]))).sequences[0]!;
        const inBatch = gb.sequences[i]!;
        if (caps.deterministic)
          expect(alone.tokens.join() === inBatch.tokens.join(), `Generate sequence ${i}: tokens [${inBatch.tokens}] in the batch, [${alone.tokens}] alone`);
        if (alone.tokens.join() !== inBatch.tokens.join()) continue;
        alone.logprobs.forEach((x, k) => {
          const d = Math.abs(x - inBatch.logprobs[k]!);
          if (!(d <= gmax)) gmax = Number.isNaN(d) ? NaN : d;
        });
      }
      expect(gmax <= tol, `Generate: max |Δ log-prob| ${fmt(gmax)} between a batch and its sequences alone, tolerance ${fmt(tol)}`);
      return `Score max |Δ| ${fmt(max)}, greedy Generate max |Δ| ${fmt(gmax)} (tolerance ${fmt(tol)}) over ${cs.length} sequences`;
    },
  },
];
