/**
 * A stored model version as a Hugging Face-layout directory (config.json, model.safetensors,
 * tokenizer files), to serve with transformers / vLLM / SGLang: `troupe export-model` writes it,
 * and a completed run's MLflow export uploads it (store/mlflow.ts). A LoRA version is written
 * merged (W + (α/r)·Aᵀ·Bᵀ over its base's version 0), and on request also as a PEFT adapter directory.
 */
import * as fs from 'node:fs';
import { getRun } from './runs';
import { getVersion } from './versions';
import type { CheckpointStore } from '../../infra/checkpoint-store';
import type { Sql } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { exportHfCheckpoint, HfCheckpointError, loadHfCheckpoint } from '../../engines/checkpoints/hf-layout';
import { CheckpointError, decodeWeights } from '../../engines/protocol/version-bytes';
import { normalizeTransformerSpec, paramLayout, transformerSpecKey } from '../../engines/families/transformer/spec';
import { adapterLayout, baseSpecOf, mergeLora } from '../../engines/families/transformer/lora';
import { initTransformerWeights } from '../../engines/families/transformer/init';
import { exportPeftAdapter } from '../../engines/checkpoints/peft';

export interface ExportModelArgs {
  runId: string;
  model: string;
  version: number;
  out: string;
  /** the HF directory the model started from: its config.json fields and tokenizer files carry over */
  from?: string;
  /** a LoRA version's PEFT adapter directory, beside the merged model in `out` */
  adapterOut?: string;
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
  const spec = normalizeTransformerSpec(stored.spec);
  for (const [flag, dir] of [
    ['--out', a.out],
    ['--adapter-out', a.adapterOut],
  ] as const)
    if (dir && fs.existsSync(dir) && fs.readdirSync(dir).length > 0) throw new TroupeError(`${flag} ${dir}: not empty`, 'name a new or empty directory');
  if (a.adapterOut && !spec.lora) throw new TroupeError(`--adapter-out: model ${a.model} is not a LoRA model`, 'leave --adapter-out out');
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
