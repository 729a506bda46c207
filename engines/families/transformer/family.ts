/** The transformer as a ModelFamily (spec side; the engine loads ./runtime.ts). */
import type { ModelFamily } from '../model-family';
import { initTransformerWeights } from './init';
import { checkTransformerFits } from './memory';
import { normalizeTransformerSpec, paramLayout, type TransformerSpec, transformerSpecKey } from './spec';

/** Position 0 has no predecessor, so the first scored or generated token needs a context token; positions end at maxSeq. */
export function transformerSequenceIssue(s: TransformerSpec, contextLength: number, total: number): { field: '' | 'context'; message: string } | undefined {
  if (contextLength < 1)
    return { field: 'context', message: 'needs at least one token (the transformer has no start-of-sequence padding; teams supply a start token)' };
  if (total > s.maxSeq) return { field: '', message: `context + tokens = ${total} exceeds the model's maxSeq ${s.maxSeq}` };
  return undefined;
}

export const transformerFamily: ModelFamily<TransformerSpec> = {
  name: 'transformer',
  normalize: normalizeTransformerSpec,
  key: transformerSpecKey,
  paramLayout,
  init: initTransformerWeights,
  sequenceIssue: transformerSequenceIssue,
  checkMemory: checkTransformerFits,
  // 3 generated probe tokens must still fit
  probeContextLength: (s) => Math.max(1, Math.min(16, s.maxSeq - 3)),
  describe: (s) =>
    `transformer D${s.width} L${s.layers} H${s.heads}${s.kvHeads !== s.heads ? `/${s.kvHeads}kv` : ''}${s.headDim * s.heads !== s.width ? ` hd${s.headDim}` : ''}${s.qkNorm ? ' qk-norm' : ''} F${s.mlpWidth} ${s.positions} ${s.norm} ${s.mlp}${s.tiedHead ? ' tied' : ''} maxSeq ${s.maxSeq}`,
};
