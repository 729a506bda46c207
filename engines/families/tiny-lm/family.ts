/** tiny-lm as a ModelFamily (spec side; the engine loads ./runtime.ts). */
import type { ModelFamily } from '../model-family';
import { initWeights } from './init';
import { normalizeSpec, paramLayout, specKey, type TinyLmSpec } from './spec';

export const tinyLmFamily: ModelFamily<TinyLmSpec> = {
  name: 'tiny-lm',
  normalize: (input, prefix) => normalizeSpec(input as Partial<TinyLmSpec>, prefix),
  key: specKey,
  paramLayout,
  init: initWeights,
  // a sliding window: any context length (even 0, all padding) and any length runs
  sequenceIssue: () => undefined,
  probeContextLength: (s) => s.contextWindow,
  describe: (s) => `tiny-lm W${s.contextWindow} E${s.embedDim} H${s.hiddenDim} L${s.layers} ${s.activation}`,
};
