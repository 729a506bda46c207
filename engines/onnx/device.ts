/**
 * Device selection for the engine: `cpu`, `cuda:N` or `auto`, and the ONNX
 * Runtime session options every graph is created with.
 *
 * `cuda:N` creates a probe session on the CUDA EP and fails with onnxruntime's
 * own error if it cannot (onnxruntime-node never falls back silently; its
 * native loader also logs the dlopen error on stderr). `auto` tries cuda:0 and
 * falls back to CPU, recording the reason (reported in logs, Health and Stats).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import { Graph, encodeModel } from './graph/builder';
import { DEFAULT_MICRO_BATCH_BYTES, type MemoryPolicy, type SessionFactory } from './model-runtime';

export type DeviceRequest = { kind: 'cpu' } | { kind: 'cuda'; deviceId: number } | { kind: 'auto' };

export function parseDevice(s: string): DeviceRequest {
  if (s === 'cpu') return { kind: 'cpu' };
  if (s === 'auto') return { kind: 'auto' };
  const m = /^cuda(?::(\d+))?$/.exec(s);
  if (m) return { kind: 'cuda', deviceId: m[1] ? Number(m[1]) : 0 };
  throw new Error(`invalid device "${s}": expected cpu, cuda, cuda:N or auto`);
}

export interface ResolvedDevice {
  /** "cpu" or "cuda:N" — what sessions actually run on */
  device: string;
  requested: string;
  fellBack: boolean;
  fallbackReason: string;
}

export interface SessionSettings {
  /** intra-op threads for generate/score sessions (the update session always uses 1) */
  intraOpThreads: number;
  /** default: defaultMemoryPolicy() */
  memory?: MemoryPolicy;
  /**
   * Called when a session has been built and after each of its runs (finished or failed): device work
   * done, the engine's progress (engine.ts: Health's device_runs, which the pool worker's hang watchdog reads).
   */
  onDeviceWork?: () => void;
}

/**
 * What this process may use: MemAvailable of /proc/meminfo (what the host can give without
 * swapping, so other processes count) plus what the engine already holds (its RSS); 80% of
 * total RAM where /proc is missing. On CUDA pass the GPU's memory with --memory-bytes.
 */
export function freeMemoryBytes(): number {
  try {
    const kb = (file: string, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(file, 'utf8'))?.[1]) * 1024;
    const available = kb('/proc/meminfo', 'MemAvailable');
    const held = kb('/proc/self/status', 'VmRSS');
    if (Number.isFinite(available) && Number.isFinite(held)) return available + held;
  } catch {
    // not Linux
  }
  return Math.floor(0.8 * os.totalmem());
}

/** The budget (default freeMemoryBytes() at start-up) and 256 MiB micro-batches. */
export function defaultMemoryPolicy(budgetBytes = freeMemoryBytes()): MemoryPolicy {
  return { budgetBytes, microBatchBytes: DEFAULT_MICRO_BATCH_BYTES };
}

function providers(device: string): ort.InferenceSession.ExecutionProviderConfig[] {
  if (device === 'cpu') return ['cpu'];
  const deviceId = Number(device.split(':')[1] ?? 0);
  return [{ name: 'cuda', deviceId } as ort.InferenceSession.ExecutionProviderConfig];
}

export function sessionOptions(device: string, s: SessionSettings): ort.InferenceSession.SessionOptions {
  return {
    executionProviders: providers(device),
    intraOpNumThreads: s.intraOpThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
    // No CPU arena: an arena keeps each session's high-water mark for good, so generate's, score's and
    // update's peaks would add up (at Qwen3's vocabulary and 2,048 positions, 2.2 GB); without it a run's
    // memory goes back when it ends and the engine's peak is its largest run's (bench/memory.ts).
    enableCpuMemArena: false,
  };
}

/**
 * Sessions for the engine's graphs. The update graph always runs on one
 * intra-op thread: with 2 threads its backward reductions were measured to
 * differ run to run, which would break bitwise-reproducible updates. Generate
 * and score use `intraOpThreads` (their rows are independent; the batch
 * invariance probe runs with the same setting).
 */
export function sessionFactory(device: string, s: SessionSettings): SessionFactory {
  const opts = sessionOptions(device, s);
  const single = sessionOptions(device, { ...s, intraOpThreads: 1 });
  const worked = s.onDeviceWork ?? (() => undefined);
  return {
    memory: s.memory ?? defaultMemoryPolicy(),
    async create(model: Uint8Array, label: string) {
      let session: ort.InferenceSession;
      try {
        session = await ort.InferenceSession.create(model, label === 'update' ? single : opts);
      } catch (e) {
        throw new Error(`creating the ${label} session on ${device} failed: ${(e as Error).message}`);
      } finally {
        worked();
      }
      return reportingRuns(session, worked);
    },
  };
}

/**
 * `session`, with `worked` called after each run. A spec's first use is dozens of runs in one device-queue
 * task (batch-invariance probe: at Qwen3's 151,669-token vocabulary, 42 runs and 25 s on a loaded 2-core
 * host), as is a batch split into runs by memory: each run is progress.
 */
function reportingRuns(session: ort.InferenceSession, worked: () => void): ort.InferenceSession {
  const run = session.run.bind(session) as (...args: unknown[]) => Promise<ort.InferenceSession.ReturnType>;
  const counted = async (...args: unknown[]) => {
    try {
      return await run(...args);
    } finally {
      worked();
    }
  };
  return Object.assign(session, { run: counted as ort.InferenceSession['run'] });
}

/** Which provider libraries the installed onnxruntime-node ships (explains CUDA load failures). */
function cudaLibraryHint(): string {
  try {
    const dir = path.join(path.dirname(require.resolve('onnxruntime-node/package.json')), 'bin', 'napi-v6', process.platform, process.arch);
    const missing = ['libonnxruntime_providers_shared.so', 'libonnxruntime_providers_cuda.so'].filter((f) => !fs.existsSync(path.join(dir, f)));
    if (missing.length === 0) return '';
    return ` (${missing.join(', ')} not found in ${dir}: onnxruntime-node was installed without its CUDA provider; install with ONNXRUNTIME_NODE_INSTALL=cuda12 and make the CUDA 12 / cuDNN 9 libraries loadable)`;
  } catch {
    return '';
  }
}

async function probeCuda(deviceId: number): Promise<void> {
  const g = new Graph('probe');
  const x = g.input('x', 'float32', [1]);
  g.output(g.op('Add', [x, x]), 'y', 'float32', [1]);
  const session = await ort.InferenceSession.create(encodeModel(g), {
    executionProviders: [{ name: 'cuda', deviceId } as ort.InferenceSession.ExecutionProviderConfig],
    logSeverityLevel: 2,
  });
  await session.run({ x: new ort.Tensor('float32', Float32Array.of(1), [1]) });
  await session.release();
}

/** Resolve the requested device; throws (with onnxruntime's message) only for an explicit cuda request. */
export async function resolveDevice(requested: string): Promise<ResolvedDevice> {
  const req = parseDevice(requested);
  if (req.kind === 'cpu') return { device: 'cpu', requested, fellBack: false, fallbackReason: '' };
  const deviceId = req.kind === 'cuda' ? req.deviceId : 0;
  try {
    await probeCuda(deviceId);
    return { device: `cuda:${deviceId}`, requested, fellBack: false, fallbackReason: '' };
  } catch (e) {
    const reason = `CUDA EP unavailable: ${(e as Error).message}${cudaLibraryHint()}`;
    if (req.kind === 'cuda') throw new Error(`--device ${requested}: ${reason}`);
    return { device: 'cpu', requested, fellBack: true, fallbackReason: reason };
  }
}
