/** An HF tokenizer from a model directory (tokenizer.json + tokenizer_config.json): Node-side only. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { hfTokenizer, type HfTokenizer } from './hf';

function readJson(file: string, optional: boolean): Record<string, unknown> | undefined {
  if (optional && !fs.existsSync(file)) return undefined;
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(
      `${file}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing (the model directory needs its tokenizer.json)' : (e as Error).message}`,
    );
  }
}

export function loadHfTokenizer(dir: string): HfTokenizer {
  const file = path.join(dir, 'tokenizer.json');
  const config = readJson(path.join(dir, 'tokenizer_config.json'), true) ?? {};
  // newer checkpoints keep the template in its own file
  const template = path.join(dir, 'chat_template.jinja');
  if (config.chat_template === undefined && fs.existsSync(template)) config.chat_template = fs.readFileSync(template, 'utf8');
  return hfTokenizer(readJson(file, false), config, file);
}
