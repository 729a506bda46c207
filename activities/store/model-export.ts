/**
 * A stored model version as a Hugging Face-layout directory (config.json, model.safetensors,
 * tokenizer files), to serve with transformers / vLLM / SGLang: `troupe export-model` writes it,
 * and a completed run's MLflow export uploads it (store/mlflow.ts). A LoRA version is written
 * merged (W + (α/r)·Aᵀ·Bᵀ over its base's version 0), and on request also as a PEFT adapter directory.
 * A transformers-layout model (a spec with `hf`, which only the PyTorch engine computes) is written by
 * that engine's Python (engines/pytorch/export.py: transformers' save_pretrained, PEFT's merge), so the
 * caller names the interpreter (`python`); its LoRA adapter's layout is the engine's (hf.py targets).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { getRun } from './runs';
import { getVersion } from './versions';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { copyTokenizerFiles, exportHfCheckpoint, HfCheckpointError, loadHfCheckpoint } from '../../engines/checkpoints/hf-layout';
import { CheckpointError, decodeWeights } from '../../engines/protocol/version-bytes';
import { normalizeTransformerSpec, paramLayout, transformerSpecKey } from '../../engines/families/transformer/spec';
import { adapterLayout, baseSpecOf, mergeLora } from '../../engines/families/transformer/lora';
import { initTransformerWeights } from '../../engines/families/transformer/init';
import { exportHfPeftAdapter, exportPeftAdapter, type HfLora } from '../../engines/checkpoints/peft';
import { EngineScriptError, hfTargets, runEngineScript } from '../../engines/pytorch/scripts';

export interface ExportModelArgs {
  runId: string;
  model: string;
  version: number;
  out: string;
  /** the HF directory the model started from: its config.json fields and tokenizer files carry over */
  from?: string;
  /** a LoRA version's PEFT adapter directory, beside the merged model in `out` */
  adapterOut?: string;
  /** an interpreter with the PyTorch engine's packages, asked for only by a transformers-layout model (spec.hf) */
  python?: () => string;
}

/** Writes the version; returns the files written and their dtype. */
export async function exportModelVersion(sql: Sql, store: CheckpointStore, a: ExportModelArgs): Promise<{ files: string[]; dtype: string }> {
  if (!(await getRun(sql, a.runId))) throw new TroupeError(`no run ${a.runId}`, 'list runs with `npx troupe list`');
  const stored = await getVersion(sql, store, a.runId, a.model, a.version);
  if (!stored) {
    const known = await sql`SELECT model, max(version) AS latest FROM versions WHERE run_id = ${a.runId} GROUP BY model ORDER BY model`;
    const have = known.map((r) => `${r.model} (versions 0..${r.latest})`).join(', ');
    throw new TroupeError(`run ${a.runId} has no version ${a.version} of model ${a.model}`, have ? `the run has: ${have}` : 'list runs with `npx troupe list`');
  }
  const family = (stored.spec as { family?: string }).family;
  if (family !== 'transformer') throw new TroupeError(`model ${a.model} is a ${family} model; only transformer models have a Hugging Face layout`);
  for (const [flag, dir] of [
    ['--out', a.out],
    ['--adapter-out', a.adapterOut],
  ] as const)
    if (dir && fs.existsSync(dir) && fs.readdirSync(dir).length > 0) throw new TroupeError(`${flag} ${dir}: not empty`, 'name a new or empty directory');
  const raw = stored.spec as Record<string, unknown>;
  if (a.adapterOut && !('lora' in raw)) throw new TroupeError(`--adapter-out: model ${a.model} is not a LoRA model`, 'leave --adapter-out out');
  if ('hf' in raw) return exportTransformersVersion(a, raw as HfSpec, stored.weights);
  const spec = normalizeTransformerSpec(stored.spec);
  try {
    const source = a.from ? loadHfCheckpoint(a.from) : undefined;
    if (!spec.lora) return exportHfCheckpoint(a.out, spec, decodeWeights(stored.weights, paramLayout(spec).total), source);
    // a LoRA version holds its adapter only; its base is version 0 of the base model: drawn from lora.baseSeed, or its checkpoint
    const base = baseSpecOf(spec);
    const adapter = decodeWeights(stored.weights, adapterLayout(spec).total);
    const { baseSeed, baseCheckpoint } = spec.lora;
    if (baseCheckpoint !== undefined) {
      // the directory's config fields and tokenizer files carry over, as for a checkpoint model with --from
      const ck = loadHfCheckpoint(baseCheckpoint, { maxSeq: base.maxSeq });
      if (transformerSpecKey(ck.spec) !== transformerSpecKey(base))
        throw new TroupeError(`model ${a.model}: its base ${baseCheckpoint} no longer has the shape this version was trained over`);
      if (a.adapterOut) exportPeftAdapter(a.adapterOut, spec, adapter, baseCheckpoint);
      return exportHfCheckpoint(a.out, base, mergeLora(spec, ck.theta, adapter), source ?? ck);
    }
    if (baseSeed === undefined) throw new TroupeError(`model ${a.model}: the stored spec names no base (lora.baseSeed or lora.baseCheckpoint)`);
    if (a.adapterOut) exportPeftAdapter(a.adapterOut, spec, adapter, a.from);
    return exportHfCheckpoint(a.out, base, mergeLora(spec, initTransformerWeights(base, baseSeed), adapter), source);
  } catch (e) {
    if (e instanceof HfCheckpointError || e instanceof CheckpointError) throw new TroupeError(`export-model: ${e.message}`);
    throw e;
  }
}

/** A stored spec of a transformers-layout model: its config.json, and a LoRA's targets and base directory. */
type HfSpec = { hf: Record<string, unknown>; lora?: HfLora & { baseCheckpoint?: string } };

/** A transformers-layout version through engines/pytorch/export.py; a LoRA one also as a PEFT adapter (adapterOut, else a scratch folder). */
function exportTransformersVersion(a: ExportModelArgs, spec: HfSpec, weights: Uint8Array): { files: string[]; dtype: string } {
  if (!a.python)
    throw new TroupeError(
      `model ${a.model} is a transformers-layout model (spec.hf): its export needs the PyTorch engine's Python environment`,
      'run `npx troupe export-model` (it finds or installs that environment), or set TROUPE_PYTHON',
    );
  const python = a.python();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-export-'));
  try {
    const specFile = path.join(scratch, 'spec.json');
    fs.writeFileSync(specFile, JSON.stringify(spec));
    const out = path.resolve(a.out);
    let args = [specFile, path.join(scratch, 'weights.f32'), out];
    const lora = spec.lora;
    if (lora) {
      // the adapter's layout is the engine's; PEFT reads the directory to merge it
      const targets = hfTargets(python, spec);
      const adapterDir = a.adapterOut ?? path.join(scratch, 'adapter');
      exportHfPeftAdapter(adapterDir, lora, targets, decodeWeights(weights, weights.length / 4), lora.baseCheckpoint);
      args = [specFile, '-', out, '--adapter', path.resolve(adapterDir)];
    } else fs.writeFileSync(path.join(scratch, 'weights.f32'), weights);
    const r = runEngineScript(python, ['export.py', ...args], 'writing the model (export.py)') as { files: string[]; dtype: string };
    // the tokenizer: --from's, else a LoRA base directory's
    const source = a.from ?? lora?.baseCheckpoint;
    if (source) r.files.push(...copyTokenizerFiles(source, out));
    return r;
  } catch (e) {
    if (e instanceof EngineScriptError) throw new TroupeError(`export-model: ${e.message}`);
    throw e;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}
