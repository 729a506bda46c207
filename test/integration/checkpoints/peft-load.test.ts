/**
 * What Troupe trains with LoRA loads in PEFT itself: a LoRA version written as the base's Hugging Face
 * checkpoint (exportHfCheckpoint) and a PEFT adapter directory (exportPeftAdapter), loaded with
 * transformers + PeftModel.from_pretrained (the pinned peft, in the PyTorch engine's Python environment:
 * test/helpers/peft_logprobs.py), gives the log-probs of Troupe's float64 reference forward on the merged
 * weights (mergeLora) within 1e-4, unmerged and after PEFT's merge_and_unload(); the adapter's B is drawn
 * non-zero, so a wrong module, orientation or scale shows. Llama (every projection) and GPT-2 (o, fc, proj:
 * its fused c_attn has no adapter of its own) layouts. And the other way: an adapter PEFT itself wrote
 * (get_peft_model + save_pretrained, test/helpers/peft_write.py) imports as the model's adapter
 * (importPeftAdapter, how a LoRA model starts from one) and scores as PEFT's forward does.
 *
 * Skips where the engine's Python environment cannot be made.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { exportHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { exportPeftAdapter, importPeftAdapter } from '../../../engines/checkpoints/peft';
import { initTransformerWeights } from '../../../engines/families/transformer/init';
import { adapterLayout, baseSpecOf, initAdapter, mergeLora } from '../../../engines/families/transformer/lora';
import { normalizeTransformerSpec } from '../../../engines/families/transformer/spec';
import { referenceForward } from '../../../engines/onnx/transformer/reference';
import { pytorchEngine } from '../../../stack/pytorch-engine';

const engine = pytorchEngine();
const skip = 'missing' in engine ? engine.missing : false;
const SCRIPT = path.resolve(__dirname, '../../helpers/peft_logprobs.py');
const WRITE = path.resolve(__dirname, '../../helpers/peft_write.py');
const PROMPTS = [
  [1, 5, 9, 13, 2, 7],
  [12, 3, 3, 0, 14, 6, 1],
];
const TOL = 1e-4;

const LAYOUTS = {
  llama: {
    spec: { vocabSize: 16, width: 16, layers: 2, heads: 2, kvHeads: 1, maxSeq: 16, positions: 'rope', norm: 'rmsnorm', mlp: 'swiglu', bias: false },
    targets: ['q', 'k', 'v', 'o', 'g', 'u', 'd'],
    modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
  },
  gpt2: {
    spec: { vocabSize: 16, width: 16, layers: 2, heads: 2, maxSeq: 16, positions: 'learned', norm: 'layernorm', mlp: 'gelu', bias: true },
    targets: ['o', '1', '2'],
    modules: ['attn.c_proj', 'c_fc', 'mlp.c_proj'],
  },
};

function python(args: string[]): string {
  const r = spawnSync('missing' in engine ? '' : engine.command[0]!, args, { encoding: 'utf8', timeout: 300_000, maxBuffer: 64 * 2 ** 20 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

function maxGap(a: number[][][], b: number[][][]): number {
  let d = 0;
  a.forEach((rows, i) => rows.forEach((row, p) => row.forEach((x, v) => (d = Math.max(d, Math.abs(x - b[i]![p]![v]!))))));
  return d;
}

describe('a LoRA version loads in PEFT', { skip }, () => {
  for (const [name, layout] of Object.entries(LAYOUTS)) {
    it(`${name}: PEFT's forward, unmerged and merged, equals Troupe's reference on the merged weights`, () => {
      const spec = normalizeTransformerSpec({ ...layout.spec, lora: { rank: 4, alpha: 8, targets: layout.targets, baseSeed: 3 } });
      const base = baseSpecOf(spec);
      const theta = initTransformerWeights(base, 3);
      const phi = initAdapter(spec, 5);
      for (const slot of adapterLayout(spec).slots) {
        if (slot.matrix !== 'B') continue; // B = 0 at init: draw it, so the adapter changes the outputs
        for (let i = slot.offset; i < slot.offset + slot.size; i++) phi[i] = 0.3 * Math.sin(1.7 * i + 0.5);
      }
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-peft-load-'));
      try {
        exportHfCheckpoint(path.join(tmp, 'base'), base, theta);
        exportPeftAdapter(path.join(tmp, 'adapter'), spec, phi, path.join(tmp, 'base'));
        const python = 'missing' in engine ? '' : engine.command[0]!;
        const r = spawnSync(python, [SCRIPT, JSON.stringify({ base: path.join(tmp, 'base'), adapter: path.join(tmp, 'adapter'), prompts: PROMPTS })], {
          encoding: 'utf8',
          timeout: 300_000,
          maxBuffer: 64 * 2 ** 20,
        });
        assert.equal(r.status, 0, r.stderr);
        const peft = JSON.parse(r.stdout) as { adapter: number[][][]; merged: number[][][] };
        const want = referenceForward(base, mergeLora(spec, theta, phi), PROMPTS).logp;
        const plain = referenceForward(base, theta, PROMPTS).logp;
        assert.ok(maxGap(plain, want) > 1e-2, `the adapter must change the outputs (it moved them by ${maxGap(plain, want)})`);
        assert.ok(maxGap(peft.adapter, want) < TOL, `${name}: PEFT's unmerged forward differs by ${maxGap(peft.adapter, want)}`);
        assert.ok(maxGap(peft.merged, want) < TOL, `${name}: PEFT's merge_and_unload() differs by ${maxGap(peft.merged, want)}`);
      } finally {
        fs.rmSync(tmp, { recursive: true, force: true });
      }
    });
  }

  for (const [name, layout] of Object.entries(LAYOUTS)) {
    it(`${name}: an adapter PEFT itself wrote imports as the model's adapter (importPeftAdapter), and scores as PEFT does`, () => {
      const spec = normalizeTransformerSpec({ ...layout.spec, lora: { rank: 4, alpha: 8, targets: layout.targets, baseSeed: 3 } });
      const base = baseSpecOf(spec);
      const theta = initTransformerWeights(base, 3);
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-peft-import-'));
      try {
        const baseDir = path.join(tmp, 'base');
        const adapterDir = path.join(tmp, 'adapter');
        exportHfCheckpoint(baseDir, base, theta);
        python([WRITE, JSON.stringify({ base: baseDir, out: adapterDir, r: 4, alpha: 8, targets: layout.modules, fanInFanOut: name === 'gpt2', seed: 1 })]);
        const phi = importPeftAdapter(adapterDir, spec);
        const peft = JSON.parse(python([SCRIPT, JSON.stringify({ base: baseDir, adapter: adapterDir, prompts: PROMPTS })])) as { adapter: number[][][] };
        const want = referenceForward(base, mergeLora(spec, theta, phi), PROMPTS).logp;
        const plain = referenceForward(base, theta, PROMPTS).logp;
        assert.ok(maxGap(plain, want) > 1e-2, `the imported adapter must change the outputs (it moved them by ${maxGap(plain, want)})`);
        assert.ok(maxGap(peft.adapter, want) < TOL, `${name}: PEFT's forward and the imported adapter differ by ${maxGap(peft.adapter, want)}`);
        // and it round-trips: exported again, it imports to the same bits
        exportPeftAdapter(path.join(tmp, 'again'), spec, phi);
        assert.deepEqual(importPeftAdapter(path.join(tmp, 'again'), spec), phi);
      } finally {
        fs.rmSync(tmp, { recursive: true, force: true });
      }
    });
  }
});
