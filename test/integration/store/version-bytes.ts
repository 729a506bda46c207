/** Distinct, recomputable bytes of version N (weights of `size` bytes, a small optimizer state). */
export function versionBytes(version: number, size: number): { weights: Uint8Array; optimizer: Uint8Array } {
  const weights = new Uint8Array(size);
  for (let i = 0; i < size; i++) weights[i] = (i * 31 + version * 17 + (i >> 12)) & 255;
  const optimizer = Uint8Array.from({ length: 64 }, (_, i) => (i + version) & 255);
  return { weights, optimizer };
}
