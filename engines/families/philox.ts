/**
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
 * a counter-based PRNG: output = f(key, counter), no hidden state. The engine
 * keys every random draw by (64-bit seed, stream, index), so a sequence's
 * sampling noise does not depend on which batch it ran in or on its position.
 * Pure 32-bit integer arithmetic: bit-identical on every platform.
 */

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** High 32 bits of the 64-bit product a·b (a, b uint32), exact in doubles via 16-bit halves. */
function mulhi(a: number, b: number): number {
  const al = a & 0xffff;
  const ah = a >>> 16;
  const bl = b & 0xffff;
  const bh = b >>> 16;
  const ll = al * bl;
  const lh = al * bh;
  const hl = ah * bl;
  const mid = (ll >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (ah * bh + (lh >>> 16) + (hl >>> 16) + Math.floor(mid / 65536)) >>> 0;
}

/** One Philox4x32-10 block: four uint32 outputs for counter (c0..c3) and key (k0, k1). */
export function philox4x32(c0: number, c1: number, c2: number, c3: number, k0: number, k1: number, out: Uint32Array = new Uint32Array(4)): Uint32Array {
  let x0 = c0 >>> 0;
  let x1 = c1 >>> 0;
  let x2 = c2 >>> 0;
  let x3 = c3 >>> 0;
  let key0 = k0 >>> 0;
  let key1 = k1 >>> 0;
  for (let r = 0; r < 10; r++) {
    if (r > 0) {
      key0 = (key0 + W0) >>> 0;
      key1 = (key1 + W1) >>> 0;
    }
    const hi0 = mulhi(M0, x0);
    const lo0 = Math.imul(M0, x0) >>> 0;
    const hi1 = mulhi(M1, x2);
    const lo1 = Math.imul(M1, x2) >>> 0;
    const n0 = (hi1 ^ x1 ^ key0) >>> 0;
    const n2 = (hi0 ^ x3 ^ key1) >>> 0;
    x0 = n0;
    x1 = lo1;
    x2 = n2;
    x3 = lo0;
  }
  out[0] = x0;
  out[1] = x1;
  out[2] = x2;
  out[3] = x3;
  return out;
}

/** Split a uint64 seed (bigint, decimal string or safe integer) into two uint32 key words. */
export function seedKey(seed: bigint | number | string): [number, number] {
  let s: bigint;
  try {
    s = typeof seed === 'bigint' ? seed : BigInt(seed);
  } catch {
    throw new RangeError(`seed must be an unsigned 64-bit integer, got ${String(seed)}`);
  }
  if (s < 0n || s > 0xffffffffffffffffn) throw new RangeError(`seed must be an unsigned 64-bit integer, got ${s}`);
  return [Number(s & 0xffffffffn), Number(s >> 32n)];
}

/** Streams separate unrelated uses of the same seed. */
export const STREAM_SAMPLING = 0;
export const STREAM_INIT = 1;

/** uint32 → float in [0, 1) with 24 random bits (exact in float32). */
export function toUnit(x: number): number {
  return (x >>> 8) * 5.9604644775390625e-8; // 2^-24
}

/**
 * Fill `out[at .. at+n)` with uniforms u_i = unit(philox(key, counter=(⌊i/4⌋, 0, stream, 0))[i mod 4]),
 * i.e. draw number i of (seed, stream) — independent of any other sequence.
 */
export function fillUniforms(key: [number, number], stream: number, n: number, out: Float32Array | Float64Array, at = 0): void {
  const block = new Uint32Array(4);
  for (let i = 0; i < n; i += 4) {
    philox4x32(i / 4, 0, stream, 0, key[0], key[1], block);
    for (let j = 0; j < 4 && i + j < n; j++) out[at + i + j] = toUnit(block[j]!);
  }
}
