/** A tiny workflow for the pool-worker test: version 0 and one generation through the run's pool activities. */
import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { GenerateCall, GenerateReply } from '../../../agents/episode';
import type { TrainingPoolActivities } from '../../../activities/training/pool';

export interface SmokeInput {
  poolQueue: string;
  runId: string;
  init: boolean;
  call: GenerateCall;
}

/** The reply, or the failure of the generation as the workflow sees it. */
export type SmokeOutput =
  | { generated: GenerateReply }
  | { failure: { type?: string | null; nonRetryable?: boolean | null; message: string; details: unknown[]; retryState: string | null } };

export async function engineSmokeWorkflow(input: SmokeInput): Promise<SmokeOutput> {
  const acts = proxyActivities<TrainingPoolActivities>({
    taskQueue: input.poolQueue,
    startToCloseTimeout: '1 minute',
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 3, initialInterval: '200 ms' },
  });
  const ref = { team: 'math', teamOptions: {} };
  if (input.init) await acts.initModel({ ...ref, runId: input.runId, model: input.call.model, seed: 7 });
  try {
    return { generated: await acts.generateTurn({ ...ref, runId: input.runId, call: input.call }) };
  } catch (e) {
    const cause = e instanceof ActivityFailure ? e.cause : undefined;
    if (!(cause instanceof ApplicationFailure)) throw e;
    // retryState: NON_RETRYABLE_FAILURE when Temporal gave up at once, MAXIMUM_ATTEMPTS_REACHED after retrying.
    return {
      failure: {
        type: cause.type,
        nonRetryable: cause.nonRetryable,
        message: cause.message,
        details: cause.details ?? [],
        retryState: (e as ActivityFailure).retryState ?? null,
      },
    };
  }
}
