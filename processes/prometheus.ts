/**
 * A worker process's Prometheus endpoint: Temporal's runtime serves `GET /metrics` on
 * host:port with the SDK's worker metrics (prefixed `temporal_`: task slots, pollers, poll
 * and schedule-to-start latencies, in seconds) and, through its meter, Troupe's own
 * (infra/metrics.ts). Install it before the process makes its first Temporal connection.
 */
import { Runtime, type RuntimeOptions } from '@temporalio/worker';
import { STORE_WRITE_BUCKETS, useMetricMeter } from '../infra/metrics';

/** The runtime's telemetry with a Prometheus exporter on host:port (none without a port). */
export function prometheusTelemetry(at: { host: string; port?: number }): NonNullable<RuntimeOptions['telemetryOptions']>['metrics'] {
  if (at.port === undefined) return undefined;
  const host = at.host.includes(':') && !at.host.startsWith('[') ? `[${at.host}]` : at.host;
  return {
    prometheus: {
      bindAddress: `${host}:${at.port}`,
      countersTotalSuffix: true,
      useSecondsForDurations: true,
      histogramBucketOverrides: { troupe_store_write_seconds: STORE_WRITE_BUCKETS },
    },
  };
}

/** Installs the runtime with `options`, then records Troupe's metrics through its meter. */
export function installRuntime(options: RuntimeOptions): void {
  Runtime.install(options);
  useMetricMeter(Runtime.instance().metricMeter);
}

/** A `--metrics-port` argument as a port (undefined when not given). */
export function metricsPortArg(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) throw new Error(`--metrics-port ${value}: must be a port number (1-65535)`);
  return port;
}
