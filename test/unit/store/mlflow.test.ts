/**
 * The MLflow export's rules that need no server: which tracking server a run goes to (its
 * config's `mlflow`, else MLFLOW_TRACKING_URI, `off` none), both settings refused with their
 * name when they are not an http(s) URL, and the run config as MLflow params (dotted paths to
 * leaves). The export itself runs against a real server in
 * test/integration/observability/mlflow.test.ts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { configParams, trackingUriOf } from '../../../activities/store/mlflow';
import { ConfigError, loadConfig } from '../../../infra/config';
import { parseRunConfig, RunConfigError } from '../../../schema/run-config';

test("a run's tracking server: its config's, else the default; off: none", () => {
  assert.equal(trackingUriOf({ mlflow: 'http://a:5000' }, 'http://b:5000'), 'http://a:5000');
  assert.equal(trackingUriOf({}, 'http://b:5000'), 'http://b:5000');
  assert.equal(trackingUriOf({ mlflow: 'off' }, 'http://b:5000'), undefined);
  assert.equal(trackingUriOf({}, 'off'), undefined);
  assert.equal(trackingUriOf({}, undefined), undefined);
});

test('MLFLOW_TRACKING_URI and a run config mlflow that are not http(s) URLs are refused by name', () => {
  assert.equal(loadConfig({ MLFLOW_TRACKING_URI: 'http://127.0.0.1:5000' }).mlflowTrackingUri, 'http://127.0.0.1:5000');
  assert.equal(loadConfig({ MLFLOW_TRACKING_URI: '' }).mlflowTrackingUri, undefined);
  assert.throws(
    () => loadConfig({ MLFLOW_TRACKING_URI: 'file:///tmp/mlruns' }),
    (e: unknown) => e instanceof ConfigError && e.variable === 'MLFLOW_TRACKING_URI' && /http\(s\) URL/.test(e.message),
  );
  assert.equal(parseRunConfig({ team: 'math', mlflow: 'https://mlflow.internal' }).mlflow, 'https://mlflow.internal');
  assert.throws(
    () => parseRunConfig({ team: 'math', mlflow: 'databricks' }),
    (e: unknown) => e instanceof RunConfigError && /mlflow: must be an http\(s\) URL/.test(e.message),
  );
});

test('a config as params: dotted paths to its leaves, arrays and nulls as JSON, long values cut', () => {
  assert.deepEqual(configParams({ team: 'math', steps: 3, optimizer: { all: { lr: 0.001 } }, pools: ['a', 'b'], seed: null }), {
    team: 'math',
    steps: '3',
    'optimizer.all.lr': '0.001',
    pools: '["a","b"]',
    seed: 'null',
  });
  assert.equal(configParams({ note: 'x'.repeat(7000) }).note?.length, 6000);
  assert.deepEqual(configParams({}), {});
});
