// Which task queue serves each pool a team names. A model's `pool` is the pool's name; where
// it is served is the deployment's choice, known to the control worker from its configuration
// (TROUPE_POOL_TASK_QUEUE for the default pool). Workflows cannot read that configuration, so
// a run asks once per execution through this (local) activity and the answer is recorded in
// its history: replays and retries route exactly as the first execution did.
import { DEFAULT_POOL } from '../../agents/model';

/** The task queue of `pool`: the default pool is served on `defaultPoolQueue`, any other pool on its own name. */
export function poolTaskQueue(pool: string, defaultPoolQueue: string): string {
  return pool === DEFAULT_POOL ? defaultPoolQueue : pool;
}

export function createPoolQueueActivities(deps: { poolTaskQueue?: string }) {
  const defaultPoolQueue = deps.poolTaskQueue ?? DEFAULT_POOL;
  return {
    /** pool name -> task queue, for the pools a run uses. */
    async poolTaskQueues(input: { pools: string[] }): Promise<Record<string, string>> {
      return Object.fromEntries(input.pools.map((p) => [p, poolTaskQueue(p, defaultPoolQueue)]));
    },
  };
}

export type PoolQueueActivities = ReturnType<typeof createPoolQueueActivities>;
