/**
 * Deterministic initial weights (version 0) from a seed.
 *
 * Uniform draws come from Philox (stream STREAM_INIT) and are scaled with exact
 * float arithmetic only (no log/cos), so θ₀ is bit-identical everywhere.
 *   emb ~ U(−0.5, 0.5); hidden W ~ U(±√(3/fan_in)) (unit-variance pre-activations),
 *   residual layers scaled by 0.5; Wo ~ U(±0.1/√H) so the initial policy is close
 *   to uniform (high entropy, as RL from scratch wants); biases 0.
 */
import { fillUniforms, seedKey, STREAM_INIT } from '../philox';
import { paramLayout, type TinyLmSpec } from './spec';

export function initWeights(spec: TinyLmSpec, seed: bigint | number | string): Float32Array {
  const layout = paramLayout(spec);
  const u = new Float64Array(layout.total);
  fillUniforms(seedKey(seed), STREAM_INIT, layout.total, u);
  const theta = new Float32Array(layout.total);
  for (const slot of layout.slots) {
    let a: number;
    if (slot.kind === 'bias') a = 0;
    else if (slot.kind === 'embedding') a = 0.5;
    else if (slot.name === 'wo') a = 0.1 / Math.sqrt(slot.fanIn);
    else a = Math.sqrt(3 / slot.fanIn) * (slot.name === 'w0' ? 1 : 0.5);
    for (let i = 0; i < slot.size; i++) theta[slot.offset + i] = (2 * u[slot.offset + i]! - 1) * a;
  }
  return theta;
}
