// Which onnxruntime-node execution providers work on this machine. Used by `troupe doctor`.
// cpu: create and run a one-node session. cuda: the provider library must be installed
// (GPU hosts opt in: `ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node`),
// then session creation must succeed — onnxruntime rejects it (no silent CPU fallback)
// when CUDA/cuDNN or a GPU is missing, and we report its reason.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { errorMessage } from './errors';

export interface ProviderCheck {
  name: 'cpu' | 'cuda';
  ok: boolean;
  detail: string;
}

/** A model computing y = x + x on a float tensor of shape [1], encoded as ONNX bytes. */
export function tinyModelBytes(): Uint8Array {
  const { onnx } = require('onnx-proto') as typeof import('onnx-proto');
  const tensor = { tensorType: { elemType: onnx.TensorProto.DataType.FLOAT, shape: { dim: [{ dimValue: 1 }] } } };
  const model = onnx.ModelProto.create({
    irVersion: 8,
    producerName: 'troupe-doctor',
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'doctor',
      node: [{ opType: 'Add', input: ['x', 'x'], output: ['y'] }],
      input: [{ name: 'x', type: tensor }],
      output: [{ name: 'y', type: tensor }],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}

/** Folder with onnxruntime-node's native libraries for this platform. */
export function ortNativeDir(): string | undefined {
  const pkgDir = path.dirname(require.resolve('onnxruntime-node/package.json'));
  const binDir = path.join(pkgDir, 'bin');
  if (!fs.existsSync(binDir)) return undefined;
  for (const napi of fs.readdirSync(binDir).sort().reverse()) {
    const dir = path.join(binDir, napi, os.platform(), os.arch());
    if (fs.existsSync(dir)) return dir;
  }
  return undefined;
}

export function ortVersion(): string {
  return (require('onnxruntime-node/package.json') as { version: string }).version;
}

export async function checkExecutionProviders(): Promise<ProviderCheck[]> {
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  const model = tinyModelBytes();
  const results: ProviderCheck[] = [];

  try {
    const session = await ort.InferenceSession.create(model, { executionProviders: ['cpu'] });
    const out = await session.run({ x: new ort.Tensor('float32', new Float32Array([21]), [1]) });
    const y = (out.y!.data as Float32Array)[0];
    await session.release();
    results.push({ name: 'cpu', ok: y === 42, detail: y === 42 ? 'session created and ran' : `wrong result ${y}` });
  } catch (err) {
    results.push({ name: 'cpu', ok: false, detail: `session creation failed: ${errorMessage(err)}` });
  }

  const dir = ortNativeDir();
  const cudaLib = dir ? path.join(dir, 'libonnxruntime_providers_cuda.so') : undefined;
  if (!cudaLib || !fs.existsSync(cudaLib)) {
    results.push({
      name: 'cuda',
      ok: false,
      detail:
        'CUDA provider library not installed (CPU-only install); on a GPU host: ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node (in a project: ONNXRUNTIME_NODE_INSTALL=cuda12 npm install onnxruntime-node@1.30.0)',
    });
  } else {
    try {
      const session = await ort.InferenceSession.create(model, {
        executionProviders: [{ name: 'cuda', deviceId: 0 }],
        logSeverityLevel: 4,
      });
      await session.release();
      results.push({ name: 'cuda', ok: true, detail: 'session created on cuda:0' });
    } catch (err) {
      results.push({ name: 'cuda', ok: false, detail: `library present but session creation rejected: ${errorMessage(err)}` });
    }
  }
  return results;
}
