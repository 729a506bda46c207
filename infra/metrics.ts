/**
 * Troupe's own Prometheus metrics, recorded through Temporal's runtime meter so that one
 * `/metrics` endpoint per process (the SDK's Prometheus exporter, wired by
 * processes/prometheus.ts) serves them beside the SDK's worker metrics (task slots, pollers,
 * poll and schedule-to-start latencies). Until a process hands a meter over (useMetricMeter),
 * every instrument is the SDK's no-op: library code records unconditionally.
 *
 * Names as Prometheus shows them (counters get `_total`): troupe_episodes_total{team,split,status},
 * troupe_turns_total{team,split}, troupe_tokens_generated_total{team,split},
 * troupe_tokens_trained_total{model}, troupe_updates_total{model,outcome},
 * troupe_model_version{run,model}, troupe_store_write_seconds{what} (histogram),
 * troupe_gateway_calls_total{api,status} (errors: status >= 400),
 * troupe_engine_queue_depth, troupe_engine_hangs_total, troupe_engine_restarts_total.
 */
import { noopMetricMeter, type MetricMeter } from '@temporalio/common';

/** Bucket bounds (seconds) of troupe_store_write_seconds: a row takes a millisecond, a large commit seconds. */
export const STORE_WRITE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

function instruments(m: MetricMeter) {
  return {
    episodes: m.createCounter('troupe_episodes', undefined, 'Episodes saved to the store'),
    turns: m.createCounter('troupe_turns', undefined, 'Agent turns saved to the store'),
    tokensGenerated: m.createCounter('troupe_tokens_generated', undefined, 'Response tokens of the turns saved to the store'),
    tokensTrained: m.createCounter('troupe_tokens_trained', undefined, 'Trainable tokens of committed updates'),
    updates: m.createCounter('troupe_updates', undefined, 'Update activities by outcome: committed or skipped (no trainable signal)'),
    modelVersion: m.createGauge('troupe_model_version', 'int', undefined, 'Latest version this process committed, per run and model'),
    storeWriteSeconds: m.createHistogram('troupe_store_write_seconds', 'float', undefined, 'Duration of store writes (episodes, update commits)'),
    engineQueueDepth: m.createGauge('troupe_engine_queue_depth', 'int', undefined, "Requests waiting in this pool worker's engine"),
    gatewayCalls: m.createCounter('troupe_gateway_calls', undefined, "Requests to the episodes' OpenAI-compatible gateway, by API and HTTP status"),
    engineHangs: m.createCounter('troupe_engine_hangs', undefined, 'Engines this pool worker found hung (no progress) and killed'),
    engineRestarts: m.createCounter('troupe_engine_restarts', undefined, 'Engine restarts by this pool worker after its engine exited or was killed'),
  };
}

/** Every name Prometheus shows for Troupe's instruments (each appears once it is first recorded). */
export const TROUPE_METRIC_NAMES = [
  ...['episodes', 'turns', 'tokens_generated', 'tokens_trained', 'updates', 'gateway_calls', 'engine_hangs', 'engine_restarts'].map((n) => `troupe_${n}_total`),
  'troupe_model_version',
  'troupe_engine_queue_depth',
  ...['', '_bucket', '_sum', '_count'].map((s) => `troupe_store_write_seconds${s}`),
];

let meter: MetricMeter = noopMetricMeter;
let made: ReturnType<typeof instruments> | undefined;

/** Records Troupe's metrics through `m` from now on (the process's Runtime.instance().metricMeter). */
export function useMetricMeter(m: MetricMeter): void {
  meter = m;
  made = undefined;
}

/** The instruments, on the meter in use. */
export function troupeMetrics(): ReturnType<typeof instruments> {
  return (made ??= instruments(meter));
}

/** Runs a store write and records its duration under `what`. */
export async function timedStoreWrite<T>(what: string, write: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  try {
    return await write();
  } finally {
    troupeMetrics().storeWriteSeconds.record((performance.now() - t0) / 1000, { what });
  }
}
