/**
 * The PyTorch engine's prefix cache on multi-turn episodes: the same turns on
 * two engine processes, one with the cache (the default) and one with
 * `--prefix-cache-bytes 0`, side by side. Prints numbers; not a test.
 *
 *   node --import tsx bench/prefix-cache.ts [--episodes N (32)] [--turns T (3)] [--prompt P (192)]
 *     [--new N (32)] [--reply R (32)] [--reps K (3)]
 *
 * One Generate call per turn holds every episode's sequence (a rollout's batch). Turn 1's context is
 * the prompt; turn t+1's is turn t's context, its generated tokens and R reply tokens (a tool's answer).
 * The model is a ~10M-parameter llama-layout transformer (vocab 1024, width 320, 8 layers, maxSeq
 * 512), CPU, one intra-op thread. Each rep is a fresh set of episodes (other prompts and seeds), so a
 * turn reuses only what its own episodes ran; the two engines take turns going first. Per turn: wall
 * ms and engine CPU ms (medians over reps), context rows reused; then peak RSS of each engine. Both
 * engines' tokens and log-probs are compared: the cache must not change a bit.
 */
import { parseArgs } from 'node:util';
import { EngineClient } from '../engines/protocol/client';
import { normalizeTransformerSpec, paramLayout } from '../engines/families/transformer/spec';
import { pytorchEngine } from '../stack/pytorch-engine';
import { engineCommand } from '../processes/engine-kinds';
import { spawnEngine, type SpawnedEngine } from '../gpu-workers/engine-process';
import { processCpuMs, procStatusBytes } from './lib/timing';

const { values } = parseArgs({
  options: {
    episodes: { type: 'string' },
    turns: { type: 'string' },
    prompt: { type: 'string' },
    new: { type: 'string' },
    reply: { type: 'string' },
    reps: { type: 'string' },
  },
});
const whole = (name: string, fallback: number, min = 1) => {
  const v = Number((values as Record<string, string | undefined>)[name] ?? fallback);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name}: a whole number >= ${min}, got ${String(v)}`);
  return v;
};
const EPISODES = whole('episodes', 32);
const TURNS = whole('turns', 3);
const PROMPT = whole('prompt', 192);
const NEW = whole('new', 32);
const REPLY = whole('reply', 32, 0);
const REPS = whole('reps', 3);
const V = 1024;
const MAX_SEQ = 512;
if (PROMPT + TURNS * NEW + (TURNS - 1) * REPLY > MAX_SEQ)
  throw new Error(`--prompt + turns x --new + (turns - 1) x --reply must be <= ${MAX_SEQ} (the model's maxSeq)`);
const SPEC = normalizeTransformerSpec({
  family: 'transformer',
  vocabSize: V,
  width: 320,
  layers: 8,
  heads: 8,
  kvHeads: 4,
  maxSeq: MAX_SEQ,
  positions: 'rope',
  norm: 'rmsnorm',
  mlp: 'swiglu',
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const tokens = (n: number, salt: number) => Array.from({ length: n }, (_, j) => (salt * 7919 + j * 104729 + ((salt * j) % 97)) % V);

interface Turn {
  wall: number[];
  cpu: number[];
  reused: number[];
}

interface Side {
  name: string;
  engine: SpawnedEngine;
  client: EngineClient;
  turns: Turn[];
}

/** One Generate call on one engine: its output, wall and engine CPU ms, and context rows reused. */
async function turnOn(side: Side, contexts: number[][], seed: (e: number) => number) {
  const pid = side.engine.child.pid!;
  const before = (await side.client.stats()).prefixRowsReused;
  const cpu0 = processCpuMs(pid);
  const t0 = performance.now();
  const out = await side.client.generate({
    modelKey: 'bench',
    version: 0,
    sampling: { temperature: 1, maxTokens: NEW },
    sequences: contexts.map((context, e) => ({ context, seed: seed(e) })),
  });
  const wall = performance.now() - t0;
  const cpu = processCpuMs(pid) - cpu0;
  return { out, wall, cpu, reused: (await side.client.stats()).prefixRowsReused - before };
}

/**
 * Every rep's episodes on both engines, turn by turn, the two engines alternating (so a change in the
 * machine's speed meets both alike); whether every sequence's tokens and log-probs were the same on both.
 */
async function episodes(sides: Side[]): Promise<boolean> {
  let same = true;
  for (const side of sides) await side.client.initModel({ modelKey: 'bench', spec: SPEC, seed: 1 });
  for (let rep = -1; rep < REPS; rep++) {
    // rep -1 warms up (its timings are dropped); every rep has its own prompts and seeds
    let contexts = Array.from({ length: EPISODES }, (_, e) => tokens(PROMPT, (rep + 2) * 1000 + e));
    for (let t = 0; t < TURNS; t++) {
      const seed = (e: number) => (rep + 2) * 100_000 + e * 100 + t;
      const runs = [];
      for (const side of rep % 2 === 0 ? sides : [...sides].reverse()) runs.push({ side, ...(await turnOn(side, contexts, seed)) });
      for (const r of runs)
        if (rep >= 0) {
          r.side.turns[t]!.wall.push(r.wall);
          r.side.turns[t]!.cpu.push(r.cpu);
          r.side.turns[t]!.reused.push(r.reused);
        }
      const [a, b] = runs.map((r) => r.out.sequences.map((s) => JSON.stringify([s.tokens, s.logprobs])));
      same &&= JSON.stringify(a) === JSON.stringify(b);
      const out = runs[0]!.out;
      contexts = contexts.map((ctx, e) => [...ctx, ...out.sequences[e]!.tokens, ...tokens(REPLY, 50 + t * 1000 + e)]);
    }
  }
  return same;
}

async function main() {
  const torch = pytorchEngine();
  if ('missing' in torch) throw new Error(torch.missing);
  const args = ['--device', 'cpu', '--port', '0', '--threads', '1'];
  const side = async (name: string, extra: string[]): Promise<Side> => {
    const engine = await spawnEngine([...args, ...extra], { quiet: true, command: engineCommand('pytorch') });
    const client = await EngineClient.connect(engine.listening.address);
    return { name, engine, client, turns: Array.from({ length: TURNS }, () => ({ wall: [], cpu: [], reused: [] })) };
  };
  const cached = await side('cache', []);
  const plain = await side('no cache', ['--prefix-cache-bytes', '0']);
  let same: boolean;
  const rss: number[] = [];
  try {
    same = await episodes([cached, plain]);
    for (const s of [cached, plain]) rss.push(procStatusBytes(s.engine.child.pid!, 'VmHWM'));
  } finally {
    for (const s of [cached, plain]) {
      s.client.close();
      s.engine.child.kill('SIGTERM');
    }
  }
  console.log(`# node --import tsx bench/prefix-cache.ts ${process.argv.slice(2).join(' ')}`.trimEnd());
  console.log(
    `# ${new Date().toISOString()}, ${paramLayout(SPEC).total} parameters (vocab ${V}, width 320, 8 layers, kvHeads 4, maxSeq ${MAX_SEQ}), CPU, 1 thread`,
  );
  console.log(
    `# ${EPISODES} episodes a call, ${TURNS} turns, prompt ${PROMPT}, ${NEW} new tokens a turn, ${REPLY} reply tokens between turns; medians of ${REPS} reps`,
  );
  console.log('');
  console.log('| turn | context rows a sequence | cache: wall ms (engine CPU ms) | no cache: wall ms (engine CPU ms) | CPU ratio | rows reused a sequence |');
  console.log('|---|---|---|---|---|---|');
  for (let t = 0; t < TURNS; t++) {
    const a = cached.turns[t]!;
    const b = plain.turns[t]!;
    const rows = PROMPT + t * (NEW + REPLY);
    const ratio = median(b.cpu) / Math.max(median(a.cpu), 1);
    console.log(
      `| ${t + 1} | ${rows} | ${median(a.wall).toFixed(0)} (${median(a.cpu).toFixed(0)}) | ${median(b.wall).toFixed(0)} (${median(b.cpu).toFixed(0)}) | ${ratio.toFixed(2)}x | ${(median(a.reused) / EPISODES).toFixed(0)} |`,
    );
  }
  const total = (x: Turn[]) => x.reduce((n, t) => n + median(t.cpu), 0);
  console.log('');
  console.log(`all turns, engine CPU ms: cache ${total(cached.turns).toFixed(0)}, no cache ${total(plain.turns).toFixed(0)}`);
  console.log(`peak RSS: cache ${(rss[0]! / 2 ** 20).toFixed(0)} MiB, no cache ${(rss[1]! / 2 ** 20).toFixed(0)} MiB`);
  console.log(`tokens and log-probs with and without the cache: ${same ? 'identical' : 'DIFFERENT'}`);
  if (!same) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
