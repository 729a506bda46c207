/**
 * Version 0 of a model in a run: another run's version (init-from.ts), from its checkpoint (read here, or by the engine for a model type only it
 * computes), a LoRA model's PEFT adapter, or else made by the engine from the run seed; stored once.
 */
import { ApplicationFailure } from '@temporalio/common';
import { checkpointOf } from '../../agents/model';
import type { ModelSpecInput } from '../../engines/families/model-family';
import { deriveSeed } from '../../agents/seed';
import { loadTeam } from '../../agents/team-registry';
import { saveInitialVersion, versionOfStep } from '../store/versions';
import type { TeamRef } from './control';
import { heartbeating } from './engine-work';
import type { EngineVersionsDeps } from './engine-versions';
import { checkVocabulary, pretrainedVersion, readsCheckpoint } from './pretrained';
import { importHfPeftAdapter, importPeftAdapter, type HfLora, type HfTarget } from '../../engines/checkpoints/peft';
import { HfCheckpointError } from '../../engines/checkpoints/hf-layout';
import { normalizeTransformerSpec } from '../../engines/families/transformer/spec';
import { EngineScriptError } from '../../engines/pytorch/scripts';
import { encodeWeights, sha256Hex } from '../../engines/protocol/version-bytes';
import { modelKey } from './update-step';
import { initFrom, initSpec } from './init-from';
import type { InitSource } from '../../schema/run-config';

/** `init`: version 0 is another run's version (init-from, fork; only set when the run config says so), `initField` the field it came from. */
export type InitModelInput = TeamRef & { runId: string; model: string; seed: number; init?: InitSource; initField?: string };

/** The modules a LoRA spec over a transformers-layout model targets (the PyTorch engine's layout: engines/pytorch/scripts.ts). */
export type HfTargetsOf = (spec: ModelSpecInput) => HfTarget[];

/** Version 0 of a model, from its checkpoint or else the run seed; stored once, a repeat is a no-op. */
export async function initModel(
  { sql, engine, checkpoints, hfTargets }: EngineVersionsDeps & { hfTargets?: HfTargetsOf },
  input: InitModelInput,
): Promise<{ version: 0 }> {
  if (await versionOfStep(sql, input.runId, input.model, -1)) return { version: 0 };
  const team = loadTeam(input.team, input.teamOptions);
  const spec = team.models[input.model];
  if (!spec) throw ApplicationFailure.nonRetryable(`team ${team.name} has no model ${input.model}`);
  if (input.init) {
    await initFrom(sql, {
      runId: input.runId,
      model: input.model,
      seed: input.seed,
      spec,
      init: input.init,
      ...(input.initField ? { field: input.initField } : {}),
    });
    return { version: 0 };
  }
  const dir = checkpointOf(spec);
  if (dir !== undefined && spec.base === undefined && readsCheckpoint(dir)) {
    // stored as is: engines load it from the store on first use (withVersion)
    await saveInitialVersion(sql, checkpoints, { runId: input.runId, model: input.model, ...pretrainedVersion(spec, input.model) });
    return { version: 0 };
  }
  const key = modelKey(input.runId, input.model);
  // A PEFT adapter to start from: the engine's InitModel gives the spec and optimizer state, under a key of its
  // own (the engine would hold other bytes as this model's version 0); the adapter's bytes are the PEFT file's.
  const initKey = spec.adapter === undefined ? key : `${key}#adapter-import`;
  // A cold engine builds (and probes) its sessions for a new spec first: heartbeat meanwhile.
  const v = await heartbeating(
    () => ({ phase: 'init' }),
    async () => {
      await engine().initModel({ modelKey: initKey, spec: initSpec(spec, input.seed), seed: deriveSeed(input.seed, 'init', input.model) });
      return engine().exportVersion({ modelKey: initKey, version: 0 });
    },
  );
  // a checkpoint the engine read (a model type Troupe's own loader does not: readsCheckpoint)
  if (dir !== undefined && spec.base === undefined) checkVocabulary(v.info.spec.vocabSize, spec, input.model);
  const weights = spec.adapter === undefined ? v.weights : importedAdapter(spec.adapter, v.info.spec, input.model, hfTargets);
  await saveInitialVersion(sql, checkpoints, {
    runId: input.runId,
    model: input.model,
    spec: v.info.spec,
    weights,
    optimizerState: v.optimizerState,
    sha256: spec.adapter === undefined ? v.info.weightsSha256 : sha256Hex(weights),
  });
  return { version: 0 };
}

/**
 * The bytes of the PEFT adapter in `dir` for the LoRA model whose engine spec is `spec`; one that does not fit fails
 * non-retryably, naming the file and field. Over a transformers-layout model (spec.hf) its layout is the engine's.
 */
function importedAdapter(dir: string, spec: ModelSpecInput, model: string, hfTargets?: HfTargetsOf): Uint8Array {
  try {
    if ('hf' in spec) {
      if (!hfTargets)
        throw ApplicationFailure.nonRetryable(
          `model ${model}: adapter ${dir}: over a transformers-layout model it needs the PyTorch engine's Python here`,
          'BadAdapter',
        );
      return encodeWeights(importHfPeftAdapter(dir, (spec as unknown as { lora: HfLora }).lora, hfTargets(spec)));
    }
    return encodeWeights(importPeftAdapter(dir, normalizeTransformerSpec(spec)));
  } catch (e) {
    if (e instanceof HfCheckpointError || e instanceof EngineScriptError)
      throw ApplicationFailure.nonRetryable(`model ${model}: adapter ${dir}: ${e.message}`, 'BadAdapter');
    throw e;
  }
}
