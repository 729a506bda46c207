/**
 * Deterministic initial transformer weights (version 0) from a seed.
 *
 * Uniform draws come from Philox (stream STREAM_INIT), scaled by one
 * multiplication each (no log/cos), so θ₀ is bit-identical everywhere. GPT-2's
 * scheme with uniform draws of the same standard deviation σ = 0.02
 * (U(±σ√3)): embeddings and matrices σ, the projections that write into the
 * residual stream (wo, w2 / wd) σ/√(2·layers); norm gains 1, biases 0. With
 * small embeddings and a tied head the initial policy is near uniform, as RL
 * from scratch wants.
 */
import { fillUniforms, seedKey, STREAM_INIT } from '../philox';
import { paramLayout, type TransformerSpec } from './spec';

const SIGMA = 0.02;

export function initTransformerWeights(spec: TransformerSpec, seed: bigint | number | string): Float32Array {
  const layout = paramLayout(spec);
  const u = new Float64Array(layout.total);
  fillUniforms(seedKey(seed), STREAM_INIT, layout.total, u);
  const theta = new Float32Array(layout.total);
  const half = SIGMA * Math.sqrt(3);
  for (const slot of layout.slots) {
    if (slot.kind === 'gain') {
      theta.fill(1, slot.offset, slot.offset + slot.size);
      continue;
    }
    const a = slot.kind === 'bias' ? 0 : slot.kind === 'residual-out' ? half / Math.sqrt(2 * spec.layers) : half;
    for (let i = slot.offset; i < slot.offset + slot.size; i++) theta[i] = (2 * u[i]! - 1) * a;
  }
  return theta;
}
