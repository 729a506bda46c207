/**
 * Byte formats of a version, as exchanged by LoadVersion/ExportVersion and kept
 * in the store. Both are little-endian and self-checking:
 *
 *   weights          θ as float32[P] in the spec's parameter layout (4·P bytes)
 *   optimizer_state  "TRAD" | u32 format=1 | u32 step | u32 P | m float32[P] | v float32[P]
 *                    (AdamW first/second moments and the step count t; empty = fresh
 *                    optimizer: t = 0, m = v = 0)
 *
 * sha256 fields are lowercase hex digests of exactly these bytes.
 *
 * Either may come by reference (a file of the checkpoint store, infra/checkpoint-store.ts)
 * instead of inline: readReference reads and checks it.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { pathOfUri, readVerified, sha256Hex } from '../../infra/checkpoint-store';
import { ErrorReason, EngineFault } from './errors';
import type { BlobReference } from './types';

export { sha256Hex };

const MAGIC = 0x44415254; // "TRAD" read as little-endian u32
const FORMAT = 1;
const HEADER = 16;

/** AdamW's first/second moments and step count t, as the optimizer_state bytes carry them. */
export interface OptimizerMoments {
  m: Float32Array;
  v: Float32Array;
  step: number;
}

export class CheckpointError extends Error {}

function writeF32(out: Uint8Array, offset: number, a: Float32Array): void {
  const view = new DataView(out.buffer, out.byteOffset + offset, a.length * 4);
  for (let i = 0; i < a.length; i++) view.setFloat32(i * 4, a[i]!, true);
}

function readF32(buf: Uint8Array, offset: number, n: number): Float32Array {
  const out = new Float32Array(n);
  const view = new DataView(buf.buffer, buf.byteOffset + offset, n * 4);
  for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

export function encodeWeights(theta: Float32Array): Uint8Array {
  const out = new Uint8Array(theta.length * 4);
  writeF32(out, 0, theta);
  return out;
}

export function decodeWeights(bytes: Uint8Array, paramCount: number): Float32Array {
  if (bytes.length !== paramCount * 4) {
    throw new CheckpointError(`weights: expected ${paramCount * 4} bytes (${paramCount} float32 parameters for this spec), got ${bytes.length}`);
  }
  const theta = readF32(bytes, 0, paramCount);
  const bad = theta.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) throw new CheckpointError(`weights: parameter ${bad} is not finite (${theta[bad]})`);
  return theta;
}

export function encodeOptimizerState(s: OptimizerMoments): Uint8Array {
  const n = s.m.length;
  const out = new Uint8Array(HEADER + 8 * n);
  const view = new DataView(out.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint32(4, FORMAT, true);
  view.setUint32(8, s.step, true);
  view.setUint32(12, n, true);
  writeF32(out, HEADER, s.m);
  writeF32(out, HEADER + 4 * n, s.v);
  return out;
}

export function decodeOptimizerState(bytes: Uint8Array, paramCount: number): OptimizerMoments {
  if (bytes.length === 0) return { m: new Float32Array(paramCount), v: new Float32Array(paramCount), step: 0 };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < HEADER || view.getUint32(0, true) !== MAGIC) {
    throw new CheckpointError('optimizer_state: not a troupe AdamW state (bad magic); send empty bytes for a fresh optimizer');
  }
  const format = view.getUint32(4, true);
  if (format !== FORMAT) throw new CheckpointError(`optimizer_state: unsupported format ${format} (this engine reads ${FORMAT})`);
  const step = view.getUint32(8, true);
  const n = view.getUint32(12, true);
  if (n !== paramCount || bytes.length !== HEADER + 8 * n) {
    throw new CheckpointError(`optimizer_state: holds ${n} parameters in ${bytes.length} bytes, this spec has ${paramCount}`);
  }
  const m = readF32(bytes, HEADER, n);
  const v = readF32(bytes, HEADER + 4 * n, n);
  for (let i = 0; i < n; i++) {
    if (!Number.isFinite(m[i]) || !(v[i]! >= 0) || !Number.isFinite(v[i])) {
      throw new CheckpointError(`optimizer_state: moment ${i} is invalid (m=${m[i]}, v=${v[i]})`);
    }
  }
  return { m, v, step };
}

/**
 * Writes `bytes` as `name` in the directory `dirUri` (file:///abs/dir, created if missing),
 * aside first and then renamed, so a reader never sees a partial file.
 */
export async function writeReference(dirUri: string, name: string, bytes: Uint8Array, field: string): Promise<BlobReference> {
  try {
    const dir = pathOfUri(dirUri, field);
    await fs.mkdir(dir, { recursive: true });
    const file = path.join(dir, name);
    const aside = `${file}.${process.pid}.${Date.now()}.tmp`;
    await fs.writeFile(aside, bytes);
    await fs.rename(aside, file);
    return { uri: pathToFileURL(file).href, size: bytes.length, sha256: sha256Hex(bytes) };
  } catch (e) {
    throw new EngineFault(ErrorReason.REFERENCE_UNREADABLE, `${field}: cannot write ${name} there: ${(e as Error).message}`);
  }
}

/** The bytes a reference names, checked; any failure means "send the bytes instead". */
export async function readReference(ref: BlobReference, field: string): Promise<Uint8Array> {
  try {
    return await readVerified(pathOfUri(ref.uri, `${field}.uri`), ref.size, ref.sha256);
  } catch (e) {
    throw new EngineFault(ErrorReason.REFERENCE_UNREADABLE, `${field}: ${(e as Error).message}`);
  }
}
