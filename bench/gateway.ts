/**
 * Gateway overhead: a turn through the `openai` client and the gateway (HTTP on
 * loopback, request checking, rendering, recording) against the same turn as a
 * direct engine call, on the ONNX CPU engine over gRPC. The engine is its own
 * process (spawnEngine, as a pool worker runs it); this process is the pool
 * worker's side: episodes, their clients, the gateway. Batch 1: sequential
 * calls, p50/p90 per call. 64 sessions: 64 episodes calling at once (their
 * turns batch on the engine) against 64 concurrent direct callers; calls/s.
 * With the journal: the same through the gateway with every call journaled in
 * a fresh PostgreSQL database (as a run's rollout does). Not a test.
 *
 * The gateway's cost is per call, on the episode side; the engine's grows with
 * the model. `--model transformer` (4 layers, width 256) gives each call real
 * engine work, as a served model does, to show what share of throughput the
 * per-call cost takes once generation is not free.
 *
 *   node --import tsx bench/gateway.ts [calls per session, default 100] [--model tiny-lm|transformer] [--max-tokens N]
 */
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import { agent, chatTemplate, charTokenizer, defineTeam, generatedTasks, tinyLM, transformer } from '../agents';
import { engineSpec } from '../agents/model';
import type { EpisodeIO, GenerateCall } from '../agents/episode';
import { runBatchedEpisode } from '../activities/training/episode-sandbox';
import { generateOne } from '../activities/training/pool';
import { modelKey } from '../activities/training/update-step';
import { EngineClient } from '../engines/protocol/client';
import { gatewayJournal } from '../activities/store/gateway-journal';
import { spawnEngine } from '../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../processes/engine-kinds';
import { openGatewaySessions } from '../gateway';
import { createTestDatabase } from '../testing/database';
import { machineLine } from './lib/cpu';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { model: { type: 'string' }, 'max-tokens': { type: 'string' } } });
const CALLS = Number(positionals[0] ?? 100);
const SESSIONS = 64;
const MAX_TOKENS = Number(values['max-tokens'] ?? 8);
const MODEL = values.model ?? 'tiny-lm';
if (!(Number.isInteger(CALLS) && CALLS > 0)) throw new Error(`calls per session: expected a positive integer, got ${positionals[0]}`);
if (!(Number.isInteger(MAX_TOKENS) && MAX_TOKENS > 0 && MAX_TOKENS <= 48))
  throw new Error(`--max-tokens: expected an integer 1..48, got ${values['max-tokens']}`);
if (MODEL !== 'tiny-lm' && MODEL !== 'transformer') throw new Error(`--model: expected tiny-lm or transformer, got ${MODEL}`);
const tokenizer = charTokenizer('0123456789?=');
const policy = () =>
  MODEL === 'transformer'
    ? transformer({ tokenizer, width: 256, layers: 4, heads: 4, maxSeq: 64 })
    : tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64 });
const template = "{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% elif m.role == 'user' %}{{ m.content }}={% endif %}{% endfor %}";

function team(episode: (agents: { openai: { baseURL: string; apiKey: string } }) => Promise<void>) {
  return defineTeam({
    name: 'bench-gateway',
    tokenizer,
    chatTemplate: chatTemplate(template, {}, ''),
    models: { policy: policy() },
    agents: { reader: agent({ model: 'policy', maxTokens: MAX_TOKENS, maxTurns: CALLS }) },
    limits: { maxTurns: CALLS, cpuMs: 600_000 },
    tasks: generatedTasks({ seed: 1, count: 2, evalFraction: 0.5, make: (_r, i) => ({ id: String(i), data: i }) }),
    episode: async ({ agents }) => episode(agents.reader),
    rewards: { reader: () => ({}) },
    success: () => true,
  });
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main() {
  console.log(`command: node --import tsx bench/gateway.ts ${process.argv.slice(2).join(' ')}`);
  console.log(`model: ${MODEL}, ${MAX_TOKENS} tokens a call, ${SESSIONS} sessions × ${CALLS} calls`);
  console.log(machineLine());
  const engine = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  const client = new EngineClient(engine.listening.address);
  const db = await createTestDatabase();
  const runId = 'bench';
  const spec = team(async () => undefined);
  await client.initModel({ modelKey: modelKey(runId, 'policy'), spec: engineSpec(spec.models.policy!), seed: 1 });
  const io: EpisodeIO = {
    generate: (call) => generateOne(client, runId, call),
    callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
    now: () => Date.now(),
    openSessions: openGatewaySessions,
  };
  const journaled: EpisodeIO = { ...io, journal: gatewayJournal(db.sql, runId) };
  const context = tokenizer.encode(chatTemplate(template, {}, '').open([{ role: 'user', content: '12' }]));
  const direct = (i: number): GenerateCall => ({
    model: 'policy',
    version: 0,
    context,
    maxTokens: MAX_TOKENS,
    stopTokens: [tokenizer.eosId], // as the gateway stops a turn: on EOS
    sampling: { temperature: 1, topK: 0, topP: 1 },
    seed: i,
  });
  // through the gateway: each call a fresh conversation (the same context as the direct call)
  const viaGateway = (times: number[]) =>
    team(async (reader) => {
      const openai = new OpenAI({ ...reader.openai, maxRetries: 0 });
      for (let i = 0; i < CALLS; i++) {
        const t = performance.now();
        await openai.chat.completions.create({ model: 'policy', messages: [{ role: 'user', content: '12' }], max_tokens: MAX_TOKENS });
        times.push(performance.now() - t);
      }
    });

  for (let i = 0; i < 20; i++) await generateOne(client, runId, direct(i)); // warm-up
  const directTimes: number[] = [];
  for (let i = 0; i < CALLS; i++) {
    const t = performance.now();
    await generateOne(client, runId, direct(i));
    directTimes.push(performance.now() - t);
  }
  await runBatchedEpisode(viaGateway([]), { episodeId: 'warm', seed: 1, task: 0, versions: { policy: 0 } }, io);
  const gatewayTimes: number[] = [];
  await runBatchedEpisode(viaGateway(gatewayTimes), { episodeId: 'one', seed: 2, task: 0, versions: { policy: 0 } }, io);
  const journalTimes: number[] = [];
  await runBatchedEpisode(viaGateway(journalTimes), { episodeId: 'j-one', seed: 2, task: 0, versions: { policy: 0 } }, journaled);

  // this process's CPU time per call (user + system), the engine's not included
  let cpu = process.cpuUsage();
  const cpuPerCall = () => {
    const d = process.cpuUsage(cpu);
    cpu = process.cpuUsage();
    return (d.user + d.system) / 1000 / (SESSIONS * CALLS);
  };
  let t = performance.now();
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      for (let i = 0; i < CALLS; i++) await generateOne(client, runId, direct(s * CALLS + i));
    }),
  );
  const directRate = (SESSIONS * CALLS) / ((performance.now() - t) / 1000);
  const directCpu = cpuPerCall();
  t = performance.now();
  await Promise.all(
    Array.from({ length: SESSIONS }, (_, s) => runBatchedEpisode(viaGateway([]), { episodeId: `s${s}`, seed: s, task: 0, versions: { policy: 0 } }, io)),
  );
  const gatewayRate = (SESSIONS * CALLS) / ((performance.now() - t) / 1000);
  const gatewayCpu = cpuPerCall();
  t = performance.now();
  await Promise.all(
    Array.from({ length: SESSIONS }, (_, s) =>
      runBatchedEpisode(viaGateway([]), { episodeId: `j-s${s}`, seed: s, task: 0, versions: { policy: 0 } }, journaled),
    ),
  );
  const journalRate = (SESSIONS * CALLS) / ((performance.now() - t) / 1000);
  const journalCpu = cpuPerCall();

  const ms = (x: number) => x.toFixed(2);
  console.log('| path | p50 ms | p90 ms | calls/s at 64 sessions | CPU ms per call (this process) |');
  console.log('|---|---|---|---|---|');
  console.log(`| direct engine call | ${ms(pct(directTimes, 50))} | ${ms(pct(directTimes, 90))} | ${directRate.toFixed(0)} | ${ms(directCpu)} |`);
  console.log(`| openai client + gateway | ${ms(pct(gatewayTimes, 50))} | ${ms(pct(gatewayTimes, 90))} | ${gatewayRate.toFixed(0)} | ${ms(gatewayCpu)} |`);
  console.log(
    `| ... with the journal (PostgreSQL) | ${ms(pct(journalTimes, 50))} | ${ms(pct(journalTimes, 90))} | ${journalRate.toFixed(0)} | ${ms(journalCpu)} |`,
  );
  console.log(
    `added p50 at batch 1: ${ms(pct(gatewayTimes, 50) - pct(directTimes, 50))} ms (${ms(pct(journalTimes, 50) - pct(directTimes, 50))} ms journaled); ` +
      `throughput ratio at ${SESSIONS} sessions: ${(gatewayRate / directRate).toFixed(2)} (${(journalRate / directRate).toFixed(2)} journaled)`,
  );
  client.close();
  engine.child.kill();
  await db.drop();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
