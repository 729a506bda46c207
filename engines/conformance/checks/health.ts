/**
 * Health: status, capabilities (stable, and only what is served), stats, progress.
 */
import { type Check, expect, ok, Skip } from '../context';
import { describeError, protoRpcNames } from '../wire-client';
import { fmt, generateOk } from './fixtures';

export const HEALTH_CHECKS: Check[] = [
  {
    id: 'health.serving',
    title: 'Health answers with status SERVING, a device and an uptime',
    async run(ctx) {
      const h = await ctx.health();
      expect(h.status === 'SERVING', `status ${JSON.stringify(h.status)}, expected "SERVING"`);
      expect(h.device !== '', 'device empty');
      expect(Number.isFinite(h.uptimeS) && h.uptimeS >= 0, `uptime_s ${h.uptimeS}`);
      return `device ${h.device}${h.fellBack ? ` (fell back from ${h.requestedDevice}: ${h.fallbackReason})` : ''}`;
    },
  },
  {
    id: 'health.capabilities',
    title: "Health.capabilities: protocol_version 2, rpcs ⊆ the proto's RPCs, families non-empty, score_matches_generate valid",
    async run(ctx) {
      const h = await ctx.health();
      expect(h.capabilities, 'Health.capabilities missing');
      const c = h.capabilities;
      const problems: string[] = [];
      if (c.protocolVersion !== 2) problems.push(`protocol_version ${c.protocolVersion}, expected 2`);
      if (!c.engine) problems.push('engine name empty');
      const names = protoRpcNames();
      const unknown = c.rpcs.filter((r) => !(names as string[]).includes(r));
      if (c.rpcs.length === 0) problems.push('rpcs empty');
      if (unknown.length) problems.push(`rpcs not in engine.proto: ${unknown.join(', ')}`);
      if (c.families.length === 0) problems.push('families empty');
      if (!['bit-identical', 'tolerance'].includes(c.scoreMatchesGenerate))
        problems.push(`score_matches_generate ${JSON.stringify(c.scoreMatchesGenerate)}, expected "bit-identical" or "tolerance"`);
      if (c.scoreMatchesGenerate === 'tolerance' && !(Number.isFinite(c.scoreTolerance) && c.scoreTolerance >= 0))
        problems.push(`score_tolerance ${c.scoreTolerance}`);
      expect(problems.length === 0, problems.join('; '));
      return `${c.engine}; ${c.rpcs.length} rpcs; families ${c.families.join(', ')}; deterministic ${c.deterministic}; score ${c.scoreMatchesGenerate}${c.scoreMatchesGenerate === 'tolerance' ? ` ${fmt(c.scoreTolerance)}` : ''}; by reference ${c.weightsByReference}; lora ${c.lora}`;
    },
  },
  {
    id: 'health.capabilities-stable',
    title: 'capabilities are the same in two Health calls, and Stats.max_batch equals capabilities.max_batch',
    async run(ctx) {
      await ctx.requireRpcs('Stats');
      const a = ok(await ctx.client.unary('Health', {}), 'Health').capabilities;
      const b = ok(await ctx.client.unary('Health', {}), 'Health').capabilities;
      expect(JSON.stringify(a) === JSON.stringify(b), `capabilities changed between two Health calls: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
      const st = ok(await ctx.client.unary('Stats', {}), 'Stats');
      expect(st.maxBatch === a?.maxBatch, `Stats.max_batch ${st.maxBatch}, capabilities.max_batch ${a?.maxBatch}`);
      return `max_batch ${a?.maxBatch}`;
    },
  },
  {
    id: 'health.unlisted-unimplemented',
    title: 'every RPC of the proto not in capabilities.rpcs answers UNIMPLEMENTED',
    async run(ctx) {
      const caps = await ctx.capabilities();
      const unlisted = protoRpcNames().filter((r) => !caps.rpcs.includes(r) && r !== 'Health');
      if (unlisted.length === 0) throw new Skip('the engine lists every RPC');
      const def = ctx.client;
      const wrong: string[] = [];
      for (const r of unlisted) {
        const o =
          r === 'LoadVersionChunks'
            ? await def.clientStream(r, [])
            : r === 'ExportVersionChunks' || r === 'UpdateStream'
              ? await def.serverStream(r, {})
              : await def.unary(r, {});
        if (o.ok || o.error.codeName !== 'UNIMPLEMENTED') wrong.push(`${r}: ${o.ok ? 'answered' : describeError(o.error)}`);
      }
      expect(wrong.length === 0, `unlisted RPCs not UNIMPLEMENTED: ${wrong.join('; ')}`);
      return `unlisted: ${unlisted.join(', ')}`;
    },
  },
  {
    id: 'health.stats',
    title: 'Stats answers and lists the test model with its version 0',
    async run(ctx) {
      await ctx.requireRpcs('Stats');
      const base = await ctx.base();
      const s = ok(await ctx.client.unary('Stats', {}), 'Stats');
      const m = s.models.find((x) => x.modelKey === base.key);
      expect(m, `Stats.models has no entry for ${base.key} (${s.models.length} models)`);
      expect(m.versions.map(String).includes('0'), `Stats.models[${base.key}].versions [${m.versions}], expected to include 0`);
      return `${s.models.length} models; device ${s.device}`;
    },
  },

  {
    id: 'health.progress',
    title: "Health.device_runs grows across a Generate (the supervisor's hang detection reads it)",
    async run(ctx) {
      await ctx.requireRpcs('Generate');
      const base = await ctx.base();
      const before = ok(await ctx.client.unary('Health', {}), 'Health');
      await generateOk(ctx, { modelKey: base.key, version: '0', sampling: { temperature: 1, maxTokens: 3 }, sequences: [{ context: [1], seed: '9' }] });
      const after = ok(await ctx.client.unary('Health', {}), 'Health');
      expect(BigInt(after.deviceRuns) > BigInt(before.deviceRuns), `device_runs ${before.deviceRuns} → ${after.deviceRuns} across a Generate`);
      return `device_runs ${before.deviceRuns} → ${after.deviceRuns}`;
    },
  },
];
