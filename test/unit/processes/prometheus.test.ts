/**
 * The workers' Prometheus endpoint settings (processes/prometheus.ts): no port, no exporter;
 * a port binds at TROUPE_METRICS_HOST (IPv6 in brackets) with `_total` counters and seconds;
 * a bad --metrics-port is refused by name. The endpoints themselves are scraped by a real
 * Prometheus in test/integration/observability/prometheus.test.ts.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { loadConfig } from '../../../infra/config';
import { metricsPortArg, prometheusTelemetry } from '../../../processes/prometheus';

it('an endpoint only with a port, bound where TROUPE_METRICS_HOST says', () => {
  const config = loadConfig({ TROUPE_POOL_METRICS_PORT: '9466' });
  assert.deepEqual(config.metrics, { host: '127.0.0.1', controlPort: undefined, poolPort: 9466 });
  assert.equal(prometheusTelemetry({ host: config.metrics.host, port: config.metrics.controlPort }), undefined);
  const pool = prometheusTelemetry({ host: config.metrics.host, port: config.metrics.poolPort });
  assert.ok(pool && 'prometheus' in pool);
  assert.equal(pool.prometheus.bindAddress, '127.0.0.1:9466');
  assert.equal(pool.prometheus.countersTotalSuffix, true);
  const v6 = prometheusTelemetry({ host: '::', port: 9465 });
  assert.ok(v6 && 'prometheus' in v6);
  assert.equal(v6.prometheus.bindAddress, '[::]:9465');
  assert.throws(() => loadConfig({ TROUPE_CONTROL_METRICS_PORT: 'x' }), /TROUPE_CONTROL_METRICS_PORT/);
});

it('--metrics-port takes a port number only', () => {
  assert.equal(metricsPortArg(undefined), undefined);
  assert.equal(metricsPortArg('9465'), 9465);
  assert.throws(() => metricsPortArg('0'), /--metrics-port 0: must be a port number/);
  assert.throws(() => metricsPortArg('http'), /--metrics-port http/);
});
