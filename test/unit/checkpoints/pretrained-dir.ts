/** A checkpoint directory with its own tokenizer: the tiny qwen2 fixture plus a 22-id BPE over math's characters (it merges `1=`, so a tool trigger can end inside a token). */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export const HF_FIXTURES = path.resolve(__dirname, '../../fixtures/hf');

export function qwenWithTokenizer(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-qwen-tok-'));
  for (const from of ['qwen2-tiny', 'math-tokenizer']) {
    for (const f of fs.readdirSync(path.join(HF_FIXTURES, from))) fs.copyFileSync(path.join(HF_FIXTURES, from, f), path.join(dir, f));
  }
  return dir;
}
