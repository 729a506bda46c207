/**
 * The synthetic Update the engine benches time (bench/pytorch-engine.ts, bench/lora.ts):
 * 16 sequences of 16 context + 48 trained tokens over vocabulary V, advantages −1/0/1, one AdamW step.
 */
import type { UpdateRequest } from '../../engines/protocol/types';

export const UPDATE = { sequences: 16, context: 16, tokens: 48 };

/** Update of `key` from version 0 (stale bases allowed, so it repeats) with request id `id`. */
export function updateRequest(key: string, id: string, V: number): UpdateRequest {
  const t = UPDATE.tokens;
  return {
    modelKey: key,
    baseVersion: 0,
    requestId: id,
    allowStaleBase: true,
    samples: Array.from({ length: UPDATE.sequences }, (_, i) => ({
      context: Array.from({ length: UPDATE.context }, (_, j) => (i + j) % V),
      tokens: Array.from({ length: t }, (_, j) => (i * 5 + j) % V),
      lossMask: new Array(t).fill(1),
      advantages: Array.from({ length: t }, (_, j) => ((i + j) % 3) - 1),
      oldLogprobs: new Array(t).fill(-Math.log(V)),
      lossWeights: new Array(t).fill(1 / (UPDATE.sequences * t)),
      refLogprobs: [],
    })),
    settings: { lr: 1e-4, innerSteps: 1 },
  } as UpdateRequest;
}
