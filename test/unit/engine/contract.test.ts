/**
 * The engine contract's data (engines/protocol/contract.json) is defined once: both
 * languages read it, and what restates it in prose or another name agrees with it.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import contract from '../../../engines/protocol/contract.json';
import { ErrorReason, REASON_STATUS } from '../../../engines/protocol/errors';
import { DEFAULT_UPDATE_SETTINGS, ENGINE_LIMITS, MAX_TOKENS_LIMIT } from '../../../engines/protocol/types';
import { OPTIMIZER_DEFAULTS } from '../../../schema/optimizer';
import { repoRoot } from '../../../infra/paths';

const read = (rel: string) => fs.readFileSync(path.join(repoRoot, rel), 'utf8');
const proto = read('engines/protocol/engine.proto');
const camel = (snake: string) => snake.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

test("engine.proto's table of error reasons is contract.json's", () => {
  const rows = [...proto.matchAll(/^\/\/ {3}([A-Z_]+) +([A-Z_]+) {2,}\S/gm)].map((m) => [m[2], m[1]]);
  assert.deepEqual(Object.fromEntries(rows), contract.errorReasons);
});

test('every reason has its gRPC status; the client adds only its own three', () => {
  for (const [reason, name] of Object.entries(contract.errorReasons)) {
    assert.equal(REASON_STATUS[reason as ErrorReason], status[name as keyof typeof status], reason);
    assert.equal(ErrorReason[reason as ErrorReason], reason);
  }
  const clientOnly = Object.keys(ErrorReason).filter((r) => !(r in contract.errorReasons));
  assert.deepEqual(clientOnly.sort(), ['CANCELLED', 'DEADLINE_EXCEEDED', 'UNAVAILABLE']);
});

test('updateDefaults name every UpdateSettings field of engine.proto, by its JSON name', () => {
  const body = /message UpdateSettings \{([^}]*)\}/.exec(proto)?.[1] ?? '';
  const fields = [...body.matchAll(/^\s*(?:optional\s+)?\w+\s+(\w+)\s*=\s*\d+;/gm)].map((m) => camel(m[1] ?? ''));
  assert.ok(fields.length > 10, 'UpdateSettings fields parsed from engine.proto');
  assert.deepEqual(Object.keys(contract.updateDefaults).sort(), fields.sort());
  assert.deepEqual({ ...DEFAULT_UPDATE_SETTINGS }, contract.updateDefaults);
  assert.equal(MAX_TOKENS_LIMIT, contract.limits.maxTokens);
  assert.deepEqual({ ...ENGINE_LIMITS }, contract.limits);
});

test('the Python engine (every file) reads contract.json and keeps no copy of its reasons or defaults', () => {
  const dir = 'engines/pytorch';
  const server = fs
    .readdirSync(path.join(repoRoot, dir))
    .filter((f) => f.endsWith('.py'))
    .map((f) => read(`${dir}/${f}`))
    .join('\n');
  assert.match(server, /"contract\.json"/);
  assert.doesNotMatch(server, /"INVALID_REQUEST": grpc\.StatusCode/);
  assert.doesNotMatch(server, /"clip_(eps_)?low": 0\.2/);
  assert.doesNotMatch(server, /(MAX_TOKENS|INNER_STEPS)_LIMIT = \d/);
});

test("a run's defaults are the engine's where they mean the same; the differences are these", () => {
  const d = DEFAULT_UPDATE_SETTINGS;
  const r = OPTIMIZER_DEFAULTS;
  // one name from the run config to the engine (engine.proto clip_low, clip_high, dual_clip, entropy_coef)
  for (const k of ['lr', 'eps', 'clipLow', 'clipHigh', 'dualClip', 'entropyCoef'] as const) assert.equal(r[k], d[k], k);
  assert.deepEqual(r.betas, [d.beta1, d.beta2]);
  assert.equal(r.gradClipMaxNorm, d.maxGradNorm);
  assert.equal(r.kl.coef, d.klCoef);
  // genuine differences: a run decays weights unless told not to; a run's KL is off until it names a type
  assert.deepEqual([r.weightDecay, d.weightDecay], [0.01, 0]);
  assert.deepEqual([r.kl.type, d.klType], ['none', 'low_var_kl']);
});
