/** Tiny workflows for the pool-worker test: they call the engine activities on the pool queue. */
import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { PoolActivities, EngineExportVersionOutput, EngineGenerateOutput } from '../../../gpu-workers/activities';

export interface SmokeInput {
  poolQueue: string;
  modelKey: string;
  /** when given, a missing model is loaded from these bytes and the call retried */
  refill?: EngineExportVersionOutput;
  init: boolean;
}

export interface SmokeOutput {
  generated: EngineGenerateOutput;
  scored: number[];
  exported?: EngineExportVersionOutput;
  refilled: boolean;
}

export async function engineSmokeWorkflow(input: SmokeInput): Promise<SmokeOutput> {
  const acts = proxyActivities<PoolActivities>({
    taskQueue: input.poolQueue,
    startToCloseTimeout: '1 minute',
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 5, initialInterval: '200 ms' },
  });
  let exported: EngineExportVersionOutput | undefined;
  if (input.init) {
    await acts.engineInitModel({ modelKey: input.modelKey, spec: { vocabSize: 16 }, seed: 7 });
    exported = await acts.engineExportVersion({ modelKey: input.modelKey, version: 0 });
  }
  const request = {
    modelKey: input.modelKey,
    version: 0,
    sequences: [{ context: [1, 2, 3], seed: '12345678901234567' }, { context: [], seed: 5 }],
    sampling: { temperature: 1, maxTokens: 6 },
  };
  let refilled = false;
  let generated: EngineGenerateOutput;
  try {
    generated = await acts.engineGenerate(request);
  } catch (e) {
    const cause = e instanceof ActivityFailure ? e.cause : undefined;
    if (!(cause instanceof ApplicationFailure) || cause.type !== 'MODEL_NOT_LOADED' || !input.refill) throw e;
    const r = input.refill;
    await acts.engineLoadVersion({ modelKey: input.modelKey, version: 0, spec: r.info.spec, weightsBase64: r.weightsBase64, optimizerStateBase64: r.optimizerStateBase64, weightsSha256: r.info.weightsSha256 });
    refilled = true;
    generated = await acts.engineGenerate(request);
  }
  const scored = await acts.engineScore({
    modelKey: input.modelKey,
    version: 0,
    sequences: [{ context: [1, 2, 3], tokens: generated.sequences[0].tokens }],
  });
  return { generated, scored: scored.sequences[0].logprobs, exported, refilled };
}
