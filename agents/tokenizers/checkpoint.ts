/**
 * A checkpoint directory's own tokenizer (its tokenizer.json), for a team that
 * trains from it (`troupe train --model DIR` where DIR has one). Only
 * Node-side code can read the files: workers register the loader
 * (activities/training/pretrained.ts). Workflow code gets a placeholder that
 * refuses to encode — the team is validated and its episodes run in
 * activities, so such a run needs batched rollouts (workflows/training-run/).
 * Workflow-safe: no Node imports.
 */
import type { Tokenizer } from '../tokenizer';

let loader: ((dir: string) => Tokenizer) | undefined;
const loaded = new Map<string, Tokenizer>();

export function setCheckpointTokenizerLoader(load: (dir: string) => Tokenizer): void {
  loader = load;
}

function placeholder(dir: string): Tokenizer {
  const refuse = (): never => {
    throw new Error(`the tokenizer of ${dir} is read in activities only: train this team with rollout "batched"`);
  };
  return { kind: 'placeholder', size: NaN, padId: -1, bosId: -1, eosId: -1, encode: refuse, decode: refuse, idsContaining: refuse };
}

/** The tokenizer of dir (one per process and directory), or the placeholder where no loader is registered. */
export function checkpointTokenizer(dir: string): Tokenizer {
  if (!loader) return placeholder(dir);
  let tok = loaded.get(dir);
  if (!tok) loaded.set(dir, (tok = loader(dir)));
  return tok;
}
