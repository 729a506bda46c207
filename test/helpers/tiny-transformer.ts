/** A tiny llama-layout transformer spec (engine InitModel) for engine tests that need a real transformer fast. */
export const TINY_TRANSFORMER = {
  family: 'transformer',
  vocabSize: 16,
  width: 32,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  maxSeq: 32,
  positions: 'rope',
  norm: 'rmsnorm',
  mlp: 'swiglu',
};
