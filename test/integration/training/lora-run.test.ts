/**
 * LoRA per agent (issue #28) end to end: the bundled `math` team with
 * `{ models: 'lora', policy: 'transformer' }` (its solver and verifier each on
 * a LoRA adapter over the frozen `policy`) trains 2 steps on a pool whose
 * engine is the built-in one, and again on the PyTorch engine (`--engine pytorch`). Each adapter gets one
 * version per step, stored as adapter bytes only; the base is never updated;
 * `troupe export-model` writes the adapter merged into its base, which scores
 * as the LoRA version within 1e-5. The same team started from a checkpoint
 * (`troupe train --model DIR`: the Qwen3 fixture) trains its adapters over the
 * directory's weights. A solver started from a PEFT adapter directory
 * (`solverAdapter`) stores that adapter as its version 0 and trains on. An
 * engine killed mid-run leaves the run ending bit for bit where the
 * uninterrupted one does. On the PyTorch engine, the same team over a mistral checkpoint (a transformers-layout
 * model, spec.hf: its q, k, v, o targets are the Llama layout's q_proj, k_proj, v_proj, o_proj modules) trains 2
 * steps: adapter-only versions over the frozen directory.
 *
 * The PyTorch runs skip, saying why, where that engine cannot run.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { exportModelVersion } from '../../../activities/store/model-export';
import { modelKey } from '../../../activities/training/update-step';
import { loadHfCheckpoint } from '../../../engines/checkpoints/hf-layout';
import { encodeWeights, sha256Hex } from '../../../engines/protocol/version-bytes';
import { getVersion, listVersions, saveInitialVersion } from '../../../activities/store/versions';
import { loadTeam } from '../../../agents/team-registry';
import { engineSpec } from '../../../agents/model';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { adapterLayout } from '../../../engines/families/transformer/lora';
import { exportPeftAdapter, importHfPeftAdapter, type HfLora } from '../../../engines/checkpoints/peft';
import { normalizeTransformerSpec, paramLayout } from '../../../engines/families/transformer/spec';
import type { trainingRun } from '../../../workflows';
import { checkRunBookkeeping, startHarness, type Harness } from '../../../testing/stack';

const torch = pytorchEngine();
const teamOptions = { models: 'lora', policy: 'transformer' };
const ENGINES = [
  { engine: 'onnx', name: 'the built-in engine', skip: false as const },
  { engine: 'pytorch', name: 'the PyTorch engine', skip: 'missing' in torch ? torch.missing : (false as const) },
];

for (const { engine, name, skip } of ENGINES)
  describe(`two agents on two LoRA adapters over one base (${name})`, { skip }, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ pool: { engine } });
    });
    after(async () => {
      await h?.shutdown();
    });

    it(`trains 2 steps on ${name}: adapter-only versions, the base frozen`, async () => {
      const steps = 2;
      const result = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: 'lora-run',
        args: [{ team: 'math', teamOptions, steps, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 2, seed: 3 }],
      });
      assert.equal(result.status, 'completed');
      // the base has no agent: it keeps version 0 (its updates are skipped: no trainable tokens)
      assert.deepEqual(result.versions, { policy: 0, solver: steps, verifier: steps });
      await checkRunBookkeeping(h, 'lora-run', steps, ['solver', 'verifier'], ['solver', 'verifier']);

      const team = loadTeam('math', teamOptions);
      const spec = normalizeTransformerSpec(engineSpec(team.models.solver!));
      const adapter = adapterLayout(spec).total;
      for (const m of ['solver', 'verifier']) {
        const v = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-run', m, steps))!;
        assert.equal(v.weights.length, 4 * adapter, `${m}: version ${steps} holds the adapter's ${adapter} values only`);
        assert.equal((v.spec as { lora?: { baseSeed?: number } }).lora?.baseSeed !== undefined, true, `${m}: the stored spec names its base`);
      }
      const shas = (await listVersions(h.db.sql, 'lora-run')).filter((v) => v.version === steps).map((v) => v.sha256);
      assert.equal(new Set(shas).size, 2, 'the two adapters trained apart');
      const base = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-run', 'policy', 0))!;
      assert.equal(base.weights.length, 4 * paramLayout(normalizeTransformerSpec(engineSpec(team.models.policy!))).total);

      // the merged export, loaded as a plain model, scores as the LoRA version
      const out = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-lora-export-'));
      try {
        await exportModelVersion(h.db.sql, h.db.checkpoints, { runId: 'lora-run', model: 'solver', version: steps, out });
        const merged = loadHfCheckpoint(out);
        const c = h.pool.getClient();
        await c.loadVersion({
          modelKey: 'merged-solver',
          version: 0,
          spec: merged.spec,
          weights: encodeWeights(merged.theta),
          optimizerState: new Uint8Array(0),
        });
        const sequences = [{ context: [1, 2, 3, 4], tokens: [5, 6, 7, 8, 9] }];
        const a = (await c.score({ modelKey: 'merged-solver', version: 0, sequences })).sequences[0]!.logprobs;
        const b = (await c.score({ modelKey: modelKey('lora-run', 'solver'), version: steps, sequences })).sequences[0]!.logprobs;
        const d = Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));
        assert.ok(d <= 1e-5, `merged export vs LoRA version: max |Δ log-prob| ${d}`);
      } finally {
        fs.rmSync(out, { recursive: true, force: true });
      }
      const stats = await h.pool.getClient().stats();
      assert.ok(stats.models.some((m) => m.modelKey === modelKey('lora-run', 'verifier')));
      console.log(
        `lora run: adapter ${adapter} values (${((100 * adapter) / paramLayout(spec).total).toFixed(1)}% of the base's ${paramLayout(spec).total}); engine holds ${stats.models.length} models`,
      );
    });

    it("from a PEFT adapter (teamOptions.solverAdapter): version 0 is the adapter's bytes, and it trains", async () => {
      // over the Qwen3 fixture: PEFT adapts q, k, v and o there (GPT-2's fused c_attn has no q, k or v module of its own)
      const base = path.resolve(__dirname, '../../fixtures/hf/qwen3-tiny');
      const spec = normalizeTransformerSpec({
        ...loadHfCheckpoint(base).spec,
        lora: { rank: 8, alpha: 16, targets: ['q', 'k', 'v', 'o'], baseCheckpoint: base },
      });
      const phi = Float32Array.from({ length: adapterLayout(spec).total }, (_, i) => 0.05 * Math.sin(0.37 * i + 1));
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-lora-adapter-'));
      try {
        exportPeftAdapter(dir, spec, phi);
        const result = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
          taskQueue: h.taskQueue,
          workflowId: 'lora-from-peft',
          args: [
            {
              team: 'math',
              teamOptions: { ...teamOptions, checkpoint: base, solverAdapter: dir },
              steps: 1,
              groupsPerStep: 2,
              groupSize: 4,
              evalEvery: 0,
              evalTasks: 2,
              seed: 3,
            },
          ],
        });
        assert.equal(result.status, 'completed');
        assert.deepEqual(result.versions, { policy: 0, solver: 1, verifier: 1 });
        const v0 = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-from-peft', 'solver', 0))!;
        assert.deepEqual(v0.weights, encodeWeights(phi), "the solver's version 0 is the PEFT adapter's bytes");
        const verifier0 = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-from-peft', 'verifier', 0))!;
        assert.notDeepEqual(verifier0.weights, v0.weights, "the verifier keeps PEFT's initialisation");
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    it('an engine killed mid-run: the restarted engine rebuilds the base from the stored specs and the run ends bit-identical', async () => {
      const run = h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: 'lora-killed',
        args: [{ team: 'math', teamOptions, steps: 2, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 2, seed: 3 }],
      });
      while (!(await listVersions(h.db.sql, 'lora-killed')).some((v) => v.model === 'solver' && v.version >= 1)) await new Promise((r) => setTimeout(r, 20));
      const pid = h.pool.supervisor!.pid!;
      process.kill(pid, 'SIGKILL');
      await h.pool.supervisor!.waitForRestart(pid);
      assert.equal((await run).status, 'completed');
      const shas = async (id: string) => (await listVersions(h.db.sql, id)).map((v) => `${v.model}:${v.version}:${v.sha256}`);
      assert.deepEqual(await shas('lora-killed'), await shas('lora-run'), 'the killed run ends where the uninterrupted one does');
      const models = (await h.pool.getClient().stats()).models.filter((m) => m.modelKey.startsWith('lora-killed/'));
      assert.ok(
        models.some((m) => m.modelKey.endsWith('/solver') && m.versions.length > 0),
        'the restarted engine loaded an adapter version from the store',
      );
    });

    if (engine === 'pytorch')
      it('over a transformers-layout checkpoint (troupe train --model DIR of a mistral): the adapters train, the base frozen', async () => {
        const python = 'missing' in torch ? '' : torch.command[0]!;
        const run = (args: string[]) => {
          const r = spawnSync(python, args, { encoding: 'utf8', timeout: 300_000 });
          assert.equal(r.status, 0, r.stderr);
          return JSON.parse(r.stdout) as unknown;
        };
        const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-lora-hf-'));
        try {
          // a mistral checkpoint with the math team's 48-token vocabulary (test/fixtures/hf/qwen3-tiny's), written by transformers
          const dir = (run([path.resolve(__dirname, '../../helpers/hf_checkpoints.py'), tmp, 'mistral-48']) as Record<string, string>)['mistral-48']!;
          const result = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
            taskQueue: h.taskQueue,
            workflowId: 'lora-hf-run',
            args: [
              { team: 'math', teamOptions: { ...teamOptions, checkpoint: dir }, steps: 2, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 2, seed: 3 },
            ],
          });
          assert.equal(result.status, 'completed');
          assert.deepEqual(result.versions, { policy: 0, solver: 2, verifier: 2 });
          const v = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-hf-run', 'solver', 2))!;
          const spec = v.spec as { hf?: { model_type?: string }; lora?: { targets?: string[]; baseCheckpoint?: string } };
          assert.equal(spec.hf?.model_type, 'mistral', 'the adapter is over the transformers-layout spec');
          // the team's q, k, v, o: over a transformers-layout model, the Llama layout's modules of those projections
          assert.deepEqual(spec.lora?.targets, ['q', 'k', 'v', 'o']);
          assert.equal(spec.lora?.baseCheckpoint, dir);
          const layout = run([path.resolve(__dirname, '../../../engines/pytorch/hf.py'), 'targets', JSON.stringify(v.spec)]) as Array<[string, number, number]>;
          assert.deepEqual(
            layout.map(([m]) => m.split('.').slice(-2).join('.')),
            [0, 1].flatMap(() => ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj']),
            'every layer has each target',
          );
          const adapter = layout.reduce((n, [, i, o]) => n + 8 * (i + o), 0);
          assert.equal(v.weights.length, 4 * adapter, `version 2 holds the adapter's ${adapter} values only`);
          const versions = await listVersions(h.db.sql, 'lora-hf-run');
          const sha = (m: string, n: number) => versions.find((x) => x.model === m && x.version === n)!.sha256;
          assert.notEqual(sha('solver', 1), sha('solver', 2), "the solver's adapter trained");
          assert.notEqual(sha('solver', 2), sha('verifier', 2), 'the two adapters trained apart');
          assert.ok(!versions.some((x) => x.model === 'policy' && x.version > 0), 'the base is never updated');

          // troupe export-model of both: transformers and PEFT load what Troupe wrote
          const out = (d: string) => path.join(tmp, d);
          const exported = (model: string, version: number, extra: { adapterOut?: string; from?: string } = {}) =>
            exportModelVersion(h.db.sql, h.db.checkpoints, {
              runId: 'lora-hf-run',
              model,
              version,
              out: out(`${model}-${version}`),
              python: () => python,
              ...extra,
            });
          const base = await exported('policy', 0);
          assert.ok(base.files.includes('model.safetensors') && base.files.includes('config.json'), base.files.join(', '));
          // a two-step run may leave B = 0 (no signal yet): the merge is checked on an adapter of the solver's spec drawn
          // at random, stored beside it as version 0 of a model of its own
          let state = 7;
          const drawn = Float32Array.from({ length: v.weights.length / 4 }, () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31 - 0.5) * 0.2);
          const drawnBytes = encodeWeights(drawn);
          await saveInitialVersion(h.db.sql, h.db.checkpoints, {
            runId: 'lora-hf-run',
            model: 'drawn',
            spec: v.spec,
            weights: drawnBytes,
            optimizerState: v.optimizerState,
            sha256: sha256Hex(drawnBytes),
          });
          // the checkpoint has the math team's vocabulary: --from copies its tokenizer files
          const merged = await exported('drawn', 0, { adapterOut: out('adapter'), from: path.resolve(__dirname, '../../fixtures/hf/math-tokenizer') });
          assert.ok(merged.files.includes('tokenizer.json'), `--from's tokenizer is copied: ${merged.files.join(', ')}`);
          assert.deepEqual(importHfPeftAdapter(out('adapter'), (v.spec as { lora: HfLora }).lora, layout), drawn, 'the adapter files hold the stored adapter');
          // the base as exported equals the checkpoint tensor for tensor; the merged model's logits equal PEFT's own
          // forward of the base with the adapter unmerged
          const check = run([
            '-c',
            [
              'import json, sys, torch',
              'from safetensors.torch import load_file',
              'from transformers import AutoModelForCausalLM',
              'from peft import PeftModel',
              'ckpt, base, merged, adapter = sys.argv[1:]',
              'a, b = load_file(ckpt + "/model.safetensors"), load_file(base + "/model.safetensors")',
              'same = sorted(a) == sorted(b) and all(torch.equal(a[n].float(), b[n]) for n in a)',
              'ids = torch.tensor([[1, 5, 9, 3, 7, 2]])',
              'm = AutoModelForCausalLM.from_pretrained(merged, torch_dtype=torch.float32).eval()',
              'p = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32), adapter).eval()',
              'plain = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).eval()',
              'with torch.no_grad(): lm, lp, l0 = m(ids).logits, p(ids).logits, plain(ids).logits',
              'print(json.dumps({"same": same, "gap": (lm - lp).abs().max().item(), "moved": (lm - l0).abs().max().item()}))',
            ].join('\n'),
            dir,
            out('policy-0'),
            out('drawn-0'),
            out('adapter'),
          ]) as { same: boolean; gap: number; moved: number };
          assert.ok(check.same, "the exported base equals the checkpoint's tensors");
          assert.ok(check.gap < 1e-4, `merged vs PEFT unmerged: max logit gap ${check.gap}`);
          assert.ok(check.moved > check.gap * 10, `the adapter changes the logits (${check.moved}) more than the merge's rounding (${check.gap})`);

          // and back: the exported adapter as the solver's version 0 of a new run over the same checkpoint
          const imported = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
            taskQueue: h.taskQueue,
            workflowId: 'lora-hf-from-peft',
            args: [
              {
                team: 'math',
                teamOptions: { ...teamOptions, checkpoint: dir, solverAdapter: out('adapter') },
                steps: 1,
                groupsPerStep: 1,
                groupSize: 2,
                evalEvery: 0,
                evalTasks: 1,
                seed: 3,
              },
            ],
          });
          assert.equal(imported.status, 'completed');
          const v0 = await getVersion(h.db.sql, h.db.checkpoints, 'lora-hf-from-peft', 'solver', 0);
          assert.deepEqual(v0?.weights, drawnBytes, "the solver's version 0 is the PEFT adapter's bytes");
        } finally {
          fs.rmSync(tmp, { recursive: true, force: true });
        }
      });

    it('over a checkpoint base (troupe train --model DIR): the adapters name the directory', async () => {
      const dir = path.resolve(__dirname, '../../fixtures/hf/qwen3-tiny');
      const result = await h.env.client.workflow.execute<typeof trainingRun>('trainingRun', {
        taskQueue: h.taskQueue,
        workflowId: 'lora-ckpt-run',
        args: [
          { team: 'math', teamOptions: { ...teamOptions, checkpoint: dir }, steps: 1, groupsPerStep: 2, groupSize: 4, evalEvery: 0, evalTasks: 2, seed: 3 },
        ],
      });
      assert.equal(result.status, 'completed');
      assert.deepEqual(result.versions, { policy: 0, solver: 1, verifier: 1 });
      const v = (await getVersion(h.db.sql, h.db.checkpoints, 'lora-ckpt-run', 'solver', 1))!;
      assert.equal((v.spec as { lora?: { baseCheckpoint?: string } }).lora?.baseCheckpoint, dir);
      const spec = normalizeTransformerSpec(v.spec);
      assert.equal(v.weights.length, 4 * adapterLayout(spec).total);
      const out = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-lora-export-'));
      try {
        await exportModelVersion(h.db.sql, h.db.checkpoints, {
          runId: 'lora-ckpt-run',
          model: 'solver',
          version: 1,
          out: path.join(out, 'merged'),
          adapterOut: path.join(out, 'adapter'),
        });
        assert.equal(loadHfCheckpoint(path.join(out, 'merged')).model.modelType, 'qwen3');
        assert.ok(fs.existsSync(path.join(out, 'adapter', 'adapter_model.safetensors')));
      } finally {
        fs.rmSync(out, { recursive: true, force: true });
      }
    });
  });
