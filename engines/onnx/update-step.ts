/**
 * One Update's device work, the same wherever it runs (on the engine's thread or on its
 * trainer thread, trainer-thread.ts): the base version's Score of the batch (for the
 * log-prob gap the update reports; skipped where the caller scored the same sequences
 * under the base just before, as an asynchronous step does for its proximal policy),
 * then the runtime's fused optimizer steps.
 */
import type { ModelRuntime, OptimState, UpdateOutput, UpdateSample, UpdateSettings } from './model-runtime';

export interface LogprobGap {
  mean: number;
  max: number;
}

export interface UpdateStepResult {
  out: UpdateOutput;
  logprobGap: LogprobGap;
}

export async function runUpdateStep(
  runtime: ModelRuntime,
  state: OptimState,
  samples: UpdateSample[],
  settings: UpdateSettings,
  training: () => void = () => undefined,
  /** the base version's log-probs of the samples' tokens, where already known */
  baseLogprobs?: ArrayLike<number>[],
): Promise<UpdateStepResult> {
  const logprobGap = gapOf(samples, baseLogprobs ?? (await runtime.score(state.theta, samples)).logprobs);
  training();
  return { out: await runtime.update(state, samples, settings), logprobGap };
}

/** How far the rollout's log-probs are from what the base weights give now (the update's first ratio is exp of this). */
function gapOf(samples: UpdateSample[], base: ArrayLike<number>[]): LogprobGap {
  let sum = 0;
  let max = 0;
  let n = 0;
  samples.forEach((s, i) => {
    for (let t = 0; t < s.tokens.length; t++) {
      if (s.lossMask[t] !== 1) continue;
      const gap = Math.abs(s.oldLogprobs[t]! - base[i]![t]!);
      sum += gap;
      max = Math.max(max, gap);
      n++;
    }
  });
  return { mean: n ? sum / n : 0, max };
}
