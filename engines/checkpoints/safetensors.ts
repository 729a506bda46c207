/**
 * The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON
 * `{ name: { dtype, shape, data_offsets: [begin, end] }, "__metadata__"?: {..} }`,
 * then the tensor bytes, offsets relative to the end of the header. Owned here
 * (read + write are ~150 lines) because every check below must hold before a
 * byte is trusted: a malformed file is a `SafetensorsError` naming the tensor
 * and the rule, never a crash or a silently wrong tensor.
 *
 * Tensors come back as float32 (F16 and BF16 widen exactly; F64 narrows).
 */

export type Dtype = 'F32' | 'F16' | 'BF16' | 'F64';
const BYTES: Record<Dtype, number> = { F32: 4, F16: 2, BF16: 2, F64: 8 };
/** Headers above this are refused rather than parsed (real ones are KBs to a few MB). */
const MAX_HEADER = 100 * 1024 * 1024;

export class SafetensorsError extends Error {
  constructor(file: string, message: string) {
    super(`${file}: ${message}`);
    this.name = 'SafetensorsError';
  }
}

export interface Tensor {
  shape: number[];
  data: Float32Array;
}

export interface SafetensorsFile {
  tensors: Map<string, Tensor & { dtype: Dtype }>;
  metadata: Record<string, string>;
}

/** Parse and validate one safetensors file's bytes; `file` names it in errors. */
export function readSafetensors(bytes: Uint8Array, file = 'safetensors'): SafetensorsFile {
  const fail = (m: string): never => {
    throw new SafetensorsError(file, m);
  };
  if (bytes.length < 8) fail(`${bytes.length} bytes: too short for the 8-byte header length`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = view.getBigUint64(0, true);
  if (n > BigInt(Math.min(MAX_HEADER, bytes.length - 8)))
    fail(`header length ${n} exceeds the file (${bytes.length} bytes: truncated?) or the ${MAX_HEADER}-byte limit`);
  const headerEnd = 8 + Number(n);
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(8, headerEnd)));
  } catch (e) {
    fail(`header is not UTF-8 JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) fail('header must be a JSON object');
  const dataLength = bytes.length - headerEnd;
  const metadata: Record<string, string> = {};
  const tensors = new Map<string, Tensor & { dtype: Dtype }>();
  const ranges: Array<[number, number, string]> = [];
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof entry !== 'object' || entry === null) fail('__metadata__ must be an object of strings');
      for (const [k, v] of Object.entries(entry as object)) {
        if (typeof v !== 'string') fail(`__metadata__.${k} must be a string`);
        metadata[k] = v;
      }
      continue;
    }
    const at = (m: string) => fail(`tensor ${JSON.stringify(name)}: ${m}`);
    const e = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    if (typeof e !== 'object' || e === null) at('entry must be an object');
    if (typeof e.dtype !== 'string' || !(e.dtype in BYTES)) at(`dtype ${JSON.stringify(e.dtype)} is not supported (F32, F16, BF16, F64)`);
    const dtype = e.dtype as Dtype;
    if (!Array.isArray(e.shape) || !e.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) at('shape must be an array of non-negative integers');
    const shape = e.shape as number[];
    const offsets = e.data_offsets;
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0))
      at('data_offsets must be [begin, end] integers');
    const [begin, end] = offsets as [number, number];
    if (begin > end) at(`data_offsets [${begin}, ${end}]: begin is after end`);
    if (end > dataLength) at(`data_offsets [${begin}, ${end}] reach past the file's ${dataLength} data bytes (the file is truncated?)`);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (elements * BYTES[dtype] !== end - begin) at(`shape [${shape}] × ${dtype} is ${elements * BYTES[dtype]} bytes but data_offsets span ${end - begin}`);
    ranges.push([begin, end, name]);
    tensors.set(name, { dtype, shape, data: decode(bytes.subarray(headerEnd + begin, headerEnd + end), dtype, elements) });
  }
  ranges.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < ranges.length; i++) {
    if (ranges[i]![0] < ranges[i - 1]![1]) fail(`tensors ${JSON.stringify(ranges[i - 1]![2])} and ${JSON.stringify(ranges[i]![2])} overlap`);
  }
  return { tensors, metadata };
}

/** Typed-array views read the host's byte order; safetensors is little-endian. */
const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
let f16Table: Float32Array | undefined;

function decode(src: Uint8Array, dtype: Dtype, n: number): Float32Array {
  if (!LITTLE_ENDIAN) throw new Error('safetensors: reading needs a little-endian host');
  const bytes = src.slice(); // own, aligned buffer: whole-array views instead of per-element DataView reads (~20× faster)
  if (dtype === 'F32') return new Float32Array(bytes.buffer, 0, n);
  if (dtype === 'F64') return Float32Array.from(new Float64Array(bytes.buffer, 0, n));
  const half = new Uint16Array(bytes.buffer, 0, n);
  const out = new Float32Array(n);
  if (dtype === 'BF16') {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) bits[i] = half[i]! << 16;
    return out;
  }
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16ToF32(h);
  }
  for (let i = 0; i < n; i++) out[i] = f16Table[half[i]!]!;
  return out;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** The bf16 bits of x when x is exactly a bf16 value, else undefined. */
function f32ToBf16Exact(x: number): number | undefined {
  f32[0] = x;
  const bits = u32[0]!;
  return (bits & 0xffff) === 0 ? bits >>> 16 : undefined;
}

/** The f16 bits of x when x is exactly an f16 value (NaN excluded), else undefined. */
function f32ToF16Exact(x: number): number | undefined {
  if (Number.isNaN(x)) return undefined;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a === Infinity) return sign | 0x7c00;
  if (a === 0) return sign;
  let exp = Math.floor(Math.log2(a));
  if (2 ** exp > a) exp--; // log2 rounding
  if (exp < -14) {
    const frac = a / 2 ** -24;
    return Number.isInteger(frac) && frac < 1024 ? sign | frac : undefined;
  }
  if (exp > 15) return undefined;
  const frac = (a / 2 ** exp - 1) * 1024;
  return Number.isInteger(frac) ? sign | ((exp + 15) << 10) | frac : undefined;
}

/** Whether every value is exactly representable in dtype (so writing it loses nothing). */
export function representable(data: Float32Array, dtype: Dtype): boolean {
  if (dtype === 'F32' || dtype === 'F64') return true;
  const exact = dtype === 'BF16' ? f32ToBf16Exact : f32ToF16Exact;
  for (let i = 0; i < data.length; i++) if (exact(data[i]!) === undefined) return false;
  return true;
}

/**
 * Serialize tensors (in the given order) as one safetensors file. Values are
 * written exactly: a value dtype cannot hold is an error, so callers choose
 * F32 when `representable` says no.
 */
export function writeSafetensors(tensors: ReadonlyArray<[string, Tensor]>, dtype: Dtype, metadata: Record<string, string> = {}): Uint8Array {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const [name, t] of tensors) {
    const elements = t.shape.reduce((a, b) => a * b, 1);
    if (elements !== t.data.length) throw new RangeError(`tensor ${name}: shape [${t.shape}] has ${elements} elements, data ${t.data.length}`);
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + elements * BYTES[dtype]] };
    offset += elements * BYTES[dtype];
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + new TextEncoder().encode(json).length) % 8)) % 8); // tensor data 8-byte aligned, as the reference writer does
  const head = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + head.length + offset);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let p = 8 + head.length;
  for (const [name, t] of tensors) {
    if (dtype === 'F32' && LITTLE_ENDIAN) {
      out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), p);
      p += t.data.byteLength;
      continue;
    }
    for (let i = 0; i < t.data.length; i++, p += BYTES[dtype]) {
      const x = t.data[i]!;
      if (dtype === 'F32') view.setFloat32(p, x, true);
      else if (dtype === 'F64') view.setFloat64(p, x, true);
      else {
        const bits = dtype === 'BF16' ? f32ToBf16Exact(x) : f32ToF16Exact(x);
        if (bits === undefined) throw new RangeError(`tensor ${name}: value ${x} is not exactly representable as ${dtype}`);
        view.setUint16(p, bits, true);
      }
    }
  }
  return out;
}
