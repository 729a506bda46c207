/**
 * Version 0 of a model that starts from a pretrained checkpoint
 * (`transformer({ checkpoint })`, `troupe train --model DIR`): the directory's
 * weights as the engine stores them (float32 bytes, fresh optimizer), so a
 * retried initModel stores the same bytes and no seeded init is drawn.
 */
import { ApplicationFailure } from '@temporalio/common';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { checkpointOf, type ModelSpec } from '../../agents/model';
import { HfCheckpointError, loadHfCheckpoint } from '../../engines/checkpoints/hf-layout';
import { HF_MODEL_TYPES, HfConfigError } from '../../engines/checkpoints/hf-config';
import { encodeWeights, sha256Hex } from '../../engines/protocol/version-bytes';
import { ModelSpecError } from '../../engines/families/model-family';
import type { TransformerSpec } from '../../engines/families/transformer/spec';
import { setCheckpointTokenizerLoader } from '../../agents/tokenizers/checkpoint';
import { loadHfTokenizer } from '../../agents/tokenizers/hf-dir';

/** Teams loaded in this process read a checkpoint's tokenizer.json (agents/tokenizers/checkpoint.ts): called by every worker's activities. */
export function readCheckpointTokenizers(): void {
  setCheckpointTokenizerLoader(loadHfTokenizer);
}

export interface PretrainedVersion {
  spec: TransformerSpec;
  weights: Uint8Array;
  /** empty: a fresh AdamW state */
  optimizerState: Uint8Array;
  sha256: string;
}

/**
 * Whether Troupe reads the directory itself (its config.json's model type is one of the family's layouts, or the
 * file cannot be read: pretrainedVersion says why). Any other model type is read by the engine that computes it
 * (the PyTorch engine, with transformers: its InitModel of the `checkpoint` spec).
 */
export function readsCheckpoint(dir: string): boolean {
  try {
    const type = (JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')) as { model_type?: unknown }).model_type;
    return (HF_MODEL_TYPES as readonly unknown[]).includes(type);
  } catch {
    return true;
  }
}

/** A checkpoint's vocabulary may be padded past the tokenizer's ids (Qwen's is), never short of them. */
export function checkVocabulary(vocabSize: number, spec: ModelSpec, model: string): void {
  if (vocabSize < spec.tokenizer.size) {
    throw ApplicationFailure.nonRetryable(
      `model ${model}: ${path.join(checkpointOf(spec) ?? '<checkpoint>', 'config.json')}: vocab_size ${vocabSize} is smaller than the team's tokenizer (${spec.tokenizer.size} ids)`,
      'BadCheckpoint',
    );
  }
}

/** The checkpoint's version 0; a directory that cannot be this model fails non-retryably, naming the file and field. */
export function pretrainedVersion(spec: ModelSpec, model: string): PretrainedVersion {
  const dir = checkpointOf(spec)!;
  const maxSeq = spec.config.maxSeq as number | undefined;
  let ckpt;
  try {
    ckpt = loadHfCheckpoint(dir, maxSeq === undefined ? {} : { maxSeq });
  } catch (e) {
    if (e instanceof HfCheckpointError || e instanceof HfConfigError || e instanceof ModelSpecError)
      throw ApplicationFailure.nonRetryable(`model ${model}: checkpoint ${dir}: ${e.message}`, 'BadCheckpoint');
    throw e;
  }
  checkVocabulary(ckpt.spec.vocabSize, spec, model);
  // a learned-position model cannot reach past its table; a rope model's bound was lowered to maxSeq above
  if (maxSeq !== undefined && maxSeq > ckpt.spec.maxSeq) {
    throw ApplicationFailure.nonRetryable(
      `model ${model}: maxSeq ${maxSeq} is more than the checkpoint's ${ckpt.spec.maxSeq} (${path.join(dir, 'config.json')} n_positions / max_position_embeddings)`,
      'BadCheckpoint',
    );
  }
  const weights = encodeWeights(ckpt.theta);
  return { spec: ckpt.spec, weights, optimizerState: new Uint8Array(0), sha256: sha256Hex(weights) };
}
