/**
 * Update: a version v+1 from v, metrics, replay by request_id, stale bases,
 * determinism, resume from an exported optimizer state, UpdateStream.
 */
import { type Check, expect, HEX64, ok } from '../context';
import { describeError, type Req } from '../wire-client';
import { fmt, generateOk, updateSamples, metricProblems, firstUpdate, sameInfo, loadRequest } from './fixtures';

export const UPDATE_CHECKS: Check[] = [
  {
    id: 'update.basic',
    title:
      'Update from version 0: version 1, base_version 0, tokens (loss_mask 1 only) and samples counted, metrics finite, optimizer_step + 1, new sha ≠ base sha, exportable, Generate on it says version 1',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = u.response;
      const trained = u.request.samples.reduce((n, s) => n + s.lossMask.filter((m) => m === 1).length, 0);
      const problems: string[] = [];
      if (!r.info) problems.push('info missing');
      else {
        if (String(r.info.version) !== '1') problems.push(`info.version ${r.info.version}, expected 1`);
        if (r.info.weightsSha256 === u.base.info.weightsSha256) problems.push("new weights_sha256 equals the base's");
        if (!HEX64.test(r.info.weightsSha256)) problems.push(`weights_sha256 ${JSON.stringify(r.info.weightsSha256)}`);
        if (r.info.optimizerStep !== u.base.info.optimizerStep + 1)
          problems.push(`optimizer_step ${r.info.optimizerStep}, expected ${u.base.info.optimizerStep + 1}`);
        if (r.info.modelKey !== u.key) problems.push(`model_key ${r.info.modelKey}`);
      }
      if (String(r.baseVersion) !== '0') problems.push(`base_version ${r.baseVersion}, expected 0`);
      if (r.tokens !== trained) problems.push(`tokens ${r.tokens}, expected ${trained} (loss_mask 1 only)`);
      if (r.samples !== u.request.samples.length) problems.push(`samples ${r.samples}, expected ${u.request.samples.length}`);
      if (r.replayed) problems.push('replayed true on the first run');
      problems.push(...metricProblems(r.metrics, 'metrics'));
      if (r.stepMetrics.length !== 1) problems.push(`${r.stepMetrics.length} step_metrics, expected 1 (inner_steps 1)`);
      r.stepMetrics.forEach((m, i) => problems.push(...metricProblems(m, `step_metrics[${i}]`)));
      if (!(r.logprobGapMax >= 0 && Number.isFinite(r.logprobGapMax))) problems.push(`logprob_gap_max ${r.logprobGapMax}`);
      expect(problems.length === 0, problems.slice(0, 5).join('; '));
      const sha = await ctx.exportedSha(u.key, '1');
      expect(sha === r.info!.weightsSha256, `ExportVersion v1: sha ${sha.slice(0, 12)}…, Update said ${r.info!.weightsSha256.slice(0, 12)}…`);
      // the new version serves, and says so per sequence
      await generateOk(
        ctx,
        {
          modelKey: u.key,
          version: '1',
          sampling: { temperature: 1, maxTokens: 4 },
          sequences: [
            { context: [1], seed: '1' },
            { context: [2, 3], seed: '2' },
          ],
        },
        'Generate on version 1',
      );
      return `loss ${fmt(r.metrics!.loss)}, grad_norm ${fmt(r.metrics!.gradNorm)}, ${r.tokens} tokens, logprob gap max ${fmt(r.logprobGapMax)}`;
    },
  },
  {
    id: 'update.metrics',
    title:
      "Update metrics at the base weights (old_logprobs = the policy's, K = 1): ratio 1 so pg_loss = loss = −Σ w·A, clip fractions 0, approx_kl ≈ 0, kl_loss 0 without ref_logprobs; entropy / entropy_sum match Score's entropies",
    async run(ctx) {
      await ctx.requireRpcs('Score');
      const u = await firstUpdate(ctx);
      const m = u.response.metrics;
      expect(m, 'metrics missing');
      const sc = ok(
        await ctx.client.unary('Score', { modelKey: u.key, version: '0', sequences: u.request.samples.map((x) => ({ context: x.context, tokens: x.tokens })) }),
        'Score of the samples on the base version',
      );
      let pg = 0;
      let hSum = 0;
      let hMean = 0;
      let n = 0;
      u.request.samples.forEach((x, i) =>
        x.tokens.forEach((_, t) => {
          if (x.lossMask[t] !== 1) return;
          const w = x.lossWeights[t]!;
          const h = sc.sequences[i]!.entropy[t]!;
          pg -= w * x.advantages[t]!;
          hSum += w * h;
          if (w !== 0) {
            hMean += h;
            n++;
          }
        }),
      );
      hMean /= n;
      const problems: string[] = [];
      const near = (name: string, got: number, want: number, tol = 1e-4) => {
        if (!(Math.abs(got - want) <= tol)) problems.push(`${name} ${fmt(got)}, expected ${fmt(want)}`);
      };
      near('pg_loss', m.pgLoss, pg);
      near('loss', m.loss, pg);
      near('kl_loss', m.klLoss, 0, 0);
      near('clip_fraction', m.clipFraction, 0, 0);
      near('dual_clip_fraction', m.dualClipFraction, 0, 0);
      near('approx_kl', m.approxKl, 0, 1e-5);
      near('entropy', m.entropy, hMean);
      near('entropy_sum', m.entropySum, hSum);
      if (!(m.gradNorm > 0)) problems.push(`grad_norm ${m.gradNorm}, expected > 0`);
      expect(problems.length === 0, problems.join('; '));
      return `pg_loss ${fmt(m.pgLoss)}, entropy ${fmt(m.entropy)}`;
    },
  },
  {
    id: 'update.replay',
    title: 'Update repeated with the same request_id: replayed true, the same version info',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = ok(await ctx.client.unary('Update', u.request), 'repeated Update');
      expect(r.replayed === true, 'replayed false on a repeat');
      expect(
        sameInfo(r.info, u.response.info) && String(r.baseVersion) === String(u.response.baseVersion),
        `replay gave v${r.info?.version} sha ${r.info?.weightsSha256.slice(0, 12)}…, first v${u.response.info?.version} sha ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
    },
  },
  {
    id: 'update.request-id-reused',
    title: 'Update with a used request_id and a different request → REQUEST_ID_REUSED (FAILED_PRECONDITION)',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const other = { ...u.request, samples: u.request.samples.map((s) => ({ ...s, advantages: s.advantages.map((a) => -a) })) };
      await ctx.expectError('Update reusing a request_id', () => ctx.client.unary('Update', other), 'FAILED_PRECONDITION', 'REQUEST_ID_REUSED');
      const sha = await ctx.exportedSha(u.key, '1');
      expect(sha === u.response.info!.weightsSha256, 'version 1 changed after REQUEST_ID_REUSED');
    },
  },
  {
    id: 'update.stale-base',
    title: 'Update from a base that is not the latest (allow_stale_base false) → STALE_BASE, nothing committed',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      await ctx.expectError(
        'Update from a stale base',
        () => ctx.client.unary('Update', { ...u.request, requestId: ctx.key('update-stale') }),
        'FAILED_PRECONDITION',
        'STALE_BASE',
      );
      const v2 = await ctx.client.unary('ExportVersion', { modelKey: u.key, version: '2' });
      expect(!v2.ok, 'version 2 exists after a STALE_BASE');
    },
  },
  {
    id: 'update.allow-stale',
    title: 'Update from a stale base with allow_stale_base true → a new latest version (2), base_version 0',
    async run(ctx) {
      const u = await firstUpdate(ctx);
      const r = ok(
        await ctx.client.unary('Update', { ...u.request, requestId: ctx.key('update-allow-stale'), allowStaleBase: true }),
        'Update with allow_stale_base',
      );
      expect(String(r.info?.version) === '2' && String(r.baseVersion) === '0', `version ${r.info?.version} base_version ${r.baseVersion}, expected 2 from 0`);
    },
  },
  {
    id: 'update.deterministic',
    title: 'The same Update (new request_id) on another key loaded with the same base bytes gives the same new weights sha',
    async run(ctx) {
      await ctx.requireDeterministic();
      await ctx.requireRpcs('LoadVersion');
      const u = await firstUpdate(ctx);
      const key = ctx.key('train-twin');
      ok(
        await ctx.client.unary('LoadVersion', loadRequest(key, '0', u.base.info.spec!, { weights: u.base.weights, optimizerState: u.base.optimizerState })),
        'LoadVersion of the base bytes',
      );
      const r = ok(await ctx.client.unary('Update', { ...u.request, modelKey: key, requestId: ctx.key('update-twin') }), 'Update on the twin');
      expect(
        r.info?.weightsSha256 === u.response.info?.weightsSha256,
        `twin's new sha ${r.info?.weightsSha256.slice(0, 12)}…, first ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
      expect(r.info?.optimizerSha256 === u.response.info?.optimizerSha256, 'same weights but another optimizer_sha256');
    },
  },
  {
    id: 'update.resume',
    title:
      'A trained version (weights + optimizer state) exported and loaded under a new key keeps its info (optimizer_step 1); an Update from it makes version 2 with optimizer_step 2',
    async run(ctx) {
      await ctx.requireRpcs('LoadVersion');
      const u = await firstUpdate(ctx);
      const v1 = ok(await ctx.client.unary('ExportVersion', { modelKey: u.key, version: '1' }), 'ExportVersion v1');
      const key = ctx.key('resume');
      const info = ok(
        await ctx.client.unary('LoadVersion', loadRequest(key, '1', u.base.info.spec!, { weights: v1.weights, optimizerState: v1.optimizerState })),
        'LoadVersion of v1 as version 1 under a new key',
      );
      expect(
        sameInfo(info, u.response.info) && info.optimizerStep === u.response.info!.optimizerStep,
        `loaded v${info.version} step ${info.optimizerStep} sha ${info.weightsSha256.slice(0, 12)}…, trained v${u.response.info?.version} step ${u.response.info?.optimizerStep} sha ${u.response.info?.weightsSha256.slice(0, 12)}…`,
      );
      const r = ok(
        await ctx.client.unary('Update', { ...u.request, modelKey: key, baseVersion: '1', requestId: ctx.key('resume-1') }),
        'Update from the loaded version 1',
      );
      expect(String(r.info?.version) === '2' && String(r.baseVersion) === '1', `version ${r.info?.version} from ${r.baseVersion}, expected 2 from 1`);
      expect(
        r.info?.optimizerStep === u.response.info!.optimizerStep + 1,
        `optimizer_step ${r.info?.optimizerStep}, expected ${u.response.info!.optimizerStep + 1}`,
      );
    },
  },
  {
    id: 'update.stream',
    title: 'UpdateStream: ≥ 1 progress then exactly one result; replays by request_id across Update and UpdateStream; errors as the stream status',
    async run(ctx) {
      await ctx.requireRpcs('UpdateStream', 'Update', 'Generate');
      const base = await ctx.initModel('stream');
      const request: Req<'Update'> = {
        modelKey: base.key,
        baseVersion: '0',
        requestId: ctx.key('stream-1'),
        allowStaleBase: false,
        samples: await updateSamples(ctx, base.key, '0'),
        settings: { lr: 0.01, innerSteps: 2 },
      };
      const stream = async (req: Req<'Update'>, what: string) => {
        const o = await ctx.client.serverStream('UpdateStream', req);
        const events = ok(o, what);
        const kinds = events.map((e) => (e.result ? 'result' : e.progress ? 'progress' : 'empty'));
        const results = kinds.filter((k) => k === 'result').length;
        expect(results === 1 && kinds[kinds.length - 1] === 'result', `${what}: events [${kinds.join(', ')}], expected progress… then exactly one result`);
        expect(!kinds.includes('empty'), `${what}: an event with neither progress nor result`);
        return { progress: events.filter((e) => e.progress).map((e) => e.progress!), result: events[events.length - 1]!.result! };
      };
      const first = await stream(request, 'UpdateStream');
      expect(first.progress.length >= 1, `UpdateStream: no progress event before the result`);
      const badPhase = first.progress.find((p) => !p.phase || !(p.elapsedMs >= 0));
      expect(!badPhase, `a progress event with phase ${JSON.stringify(badPhase?.phase)} elapsed_ms ${badPhase?.elapsedMs}`);
      const r = first.result;
      expect(
        String(r.info?.version) === '1' && String(r.baseVersion) === '0' && !r.replayed,
        `result v${r.info?.version} from ${r.baseVersion} replayed ${r.replayed}, expected v1 from 0, not replayed`,
      );
      expect(r.stepMetrics.length === 2, `${r.stepMetrics.length} step_metrics, expected 2 (inner_steps 2)`);
      const replay = ok(await ctx.client.unary('Update', request), 'Update repeating the UpdateStream request');
      expect(
        replay.replayed && sameInfo(replay.info, r.info),
        `Update after UpdateStream: replayed ${replay.replayed}, v${replay.info?.version}; expected the stream's v1 replayed`,
      );
      const second: Req<'Update'> = { ...request, baseVersion: '1', requestId: ctx.key('stream-2') };
      const u2 = ok(await ctx.client.unary('Update', second), 'Update from version 1');
      const replay2 = await stream(second, 'UpdateStream repeating an Update');
      expect(
        replay2.result.replayed && sameInfo(replay2.result.info, u2.info),
        `UpdateStream after Update: replayed ${replay2.result.replayed}, v${replay2.result.info?.version}; expected the Update's v2 replayed`,
      );
      const stale = await ctx.client.serverStream('UpdateStream', { ...request, requestId: ctx.key('stream-stale') });
      expect(!stale.ok, 'UpdateStream from a stale base succeeded');
      expect(
        stale.error.reason === 'STALE_BASE' && stale.error.codeName === 'FAILED_PRECONDITION',
        `UpdateStream from a stale base: ${describeError(stale.error)}, expected FAILED_PRECONDITION/STALE_BASE`,
      );
      expect(!stale.messages.some((e) => e.result), 'UpdateStream from a stale base sent a result before its error');
      return `${first.progress.length} progress events (${[...new Set(first.progress.map((p) => p.phase))].join(', ')})`;
    },
  },
];
