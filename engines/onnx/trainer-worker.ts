/**
 * The engine's trainer thread (started by trainer-thread.ts): one runtime per spec
 * and row policy, built with the engine's session settings; each Score it is sent
 * runs on it, each Update with runUpdateStep, as on the engine's own thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { EngineFault } from '../protocol/errors';
import { specKey } from '../families';
import { sessionFactory } from './device';
import type { ModelRuntime } from './model-runtime';
import { createRuntime } from './runtimes';
import { runUpdateStep } from './update-step';
import type { FromThread, SpecRows, ThreadJob, ThreadSettings } from './trainer-thread';

if (!parentPort) throw new Error('trainer-worker.ts is the engine trainer thread: trainer-thread.ts starts it as a Worker');
const port = parentPort;
const settings = workerData as ThreadSettings;
const post = (m: FromThread, transfer: ArrayBuffer[] = []) => port.postMessage(m, transfer);
const factory = sessionFactory(settings.device, {
  intraOpThreads: settings.intraOpThreads,
  memory: settings.memory,
  onDeviceWork: () => post({ kind: 'worked' }),
});
const runtimes = new Map<string, ModelRuntime>();

function runtimeFor(job: SpecRows): ModelRuntime {
  const key = `${specKey(job.spec)}\u0000${job.rows.minRows}\u0000${job.rows.maxRows ?? ''}`;
  let rt = runtimes.get(key);
  if (!rt) runtimes.set(key, (rt = createRuntime(job.spec, factory, job.rows)));
  return rt;
}

const buffers = (arrays: Float32Array[]) => [...new Set(arrays.map((a) => a.buffer as ArrayBuffer))];

async function run(job: ThreadJob): Promise<void> {
  try {
    const runtime = runtimeFor(job);
    if (job.kind === 'score') {
      const result = await runtime.score(job.theta, job.seqs);
      post({ kind: 'done', id: job.id, result }, buffers([...result.logprobs, ...result.entropy]));
      return;
    }
    const training = () => post({ kind: 'training', id: job.id });
    const result = await runUpdateStep(runtime, job.state, job.samples, job.settings, training, job.baseLogprobs);
    const { theta, m, v } = result.out.state;
    post({ kind: 'done', id: job.id, result }, buffers([theta, m, v]));
  } catch (e) {
    const error =
      e instanceof EngineFault ? { message: e.message, reason: e.reason, details: e.details } : { message: e instanceof Error ? e.message : String(e) };
    post({ kind: 'failed', id: job.id, error });
  }
}

port.on('message', (job: ThreadJob) => void run(job));
