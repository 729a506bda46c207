/**
 * The prepared GPU check (bench/pytorch_gpu.py) keeps working: its `--tiny` form runs here on CPU, through the
 * engine's own Generate, Update and LoRA Update code (transformers' modules via hf.py), and every measurement it
 * prints is `ok` with tokens/s above zero (bf16 is skipped on CPU, saying so).
 * Speed is not asserted: the numbers are the script's output, for a GPU run to read.
 *
 * Skips where the engine's Python environment cannot be made.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { pytorchEngine } from '../../../stack/pytorch-engine';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const SCRIPT = path.resolve(__dirname, '../../../bench/pytorch_gpu.py');

type Row = { model: string; dtype: string; what: string; status: string; tokens_per_s?: number };

describe('bench/pytorch_gpu.py --tiny', { skip }, () => {
  it('measures Generate, Update and LoRA Update', () => {
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-gpu-check-')), 'check.json');
    const python = 'missing' in engine ? '' : engine.command[0]!;
    const r = spawnSync(python, [SCRIPT, '--tiny', '--out', out], { encoding: 'utf8', timeout: 300_000 });
    assert.equal(r.status, 0, r.stderr);
    const rows = (JSON.parse(fs.readFileSync(out, 'utf8')) as { rows: Row[] }).rows;
    for (const row of rows) {
      if (row.dtype === 'bf16') assert.match(row.status, /^skipped: bf16 needs CUDA/, JSON.stringify(row));
      else assert.equal(row.status, 'ok', JSON.stringify(row));
    }
    for (const what of ['generate batch 4', 'generate batch 1', 'update 4x280', 'update-lora 4x280']) {
      const row = rows.find((x) => x.what === what && x.status === 'ok');
      assert.ok(row && (row.tokens_per_s ?? 0) > 0, `${what}: ${JSON.stringify(row)}`);
    }
    assert.match(r.stdout, /\| model \| dtype \| measurement \| result \|/, 'the table is printed');
    fs.rmSync(path.dirname(out), { recursive: true, force: true });
  });
});
