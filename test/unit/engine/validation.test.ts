/**
 * Bad requests fail with INVALID_REQUEST / MODEL_NOT_LOADED / VERSION_NOT_LOADED /
 * VERSION_CONFLICT and a message naming the field; nothing changes and the
 * engine keeps serving.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWeights } from '../../../engines/protocol/version-bytes';
import { EngineFault } from '../../../engines/protocol/errors';
import { initWeights } from '../../../engines/families/tiny-lm/init';
import { normalizeSpec } from '../../../engines/families/tiny-lm/spec';
import type { UpdateSampleInput } from '../../../engines/protocol/types';
import { cpuEngine } from './helpers';

const SPEC = { vocabSize: 8, contextWindow: 4, embedDim: 4, hiddenDim: 16 };
const sample = (over: Partial<UpdateSampleInput> = {}): UpdateSampleInput => ({
  context: [1, 2],
  tokens: [3, 4],
  lossMask: [1, 1],
  advantages: [0.5, 0.5],
  oldLogprobs: [-2, -2],
  lossWeights: [0.5, 0.5],
  ...over,
});
const gen = (over: Record<string, unknown> = {}) => ({
  modelKey: 'm',
  version: 0,
  sequences: [{ context: [1], seed: 1 }],
  sampling: { maxTokens: 3 },
  ...over,
});

test('bad requests are refused with the right reason and a clear message', async () => {
  const engine = cpuEngine();
  const info = await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 1 });
  const cases: [string, () => Promise<unknown>, string, RegExp][] = [
    ['unknown model', () => engine.generate(gen({ modelKey: 'nope' })), 'MODEL_NOT_LOADED', /model "nope" is not loaded/],
    ['unknown version', () => engine.generate(gen({ version: 9 })), 'VERSION_NOT_LOADED', /version 9 is not loaded .*loaded: 0/],
    ['empty batch', () => engine.generate(gen({ sequences: [] })), 'INVALID_REQUEST', /sequences: empty batch/],
    [
      'token out of vocabulary',
      () => engine.generate(gen({ sequences: [{ context: [1, 8], seed: 1 }] })),
      'INVALID_REQUEST',
      /sequences\[0\]\.context\[1\]: token id 8 is outside the vocabulary \[0, 7\]/,
    ],
    [
      'stop token out of vocabulary',
      () => engine.generate(gen({ sampling: { maxTokens: 2, stopTokens: [99] } })),
      'INVALID_REQUEST',
      /sampling\.stop_tokens\[0\]/,
    ],
    ['max_tokens 0', () => engine.generate(gen({ sampling: { maxTokens: 0 } })), 'INVALID_REQUEST', /sampling\.max_tokens/],
    ['negative temperature', () => engine.generate(gen({ sampling: { maxTokens: 2, temperature: -1 } })), 'INVALID_REQUEST', /sampling\.temperature/],
    ['top_p > 1', () => engine.generate(gen({ sampling: { maxTokens: 2, topP: 1.5 } })), 'INVALID_REQUEST', /sampling\.top_p/],
    ['bad seed', () => engine.generate(gen({ sequences: [{ context: [], seed: -3 }] })), 'INVALID_REQUEST', /sequences\[0\]\.seed/],
    ['score unknown version', () => engine.score({ modelKey: 'm', version: 4, sequences: [{ context: [], tokens: [1] }] }), 'VERSION_NOT_LOADED', /version 4/],
    [
      'score token out of vocabulary',
      () => engine.score({ modelKey: 'm', version: 0, sequences: [{ context: [], tokens: [8] }] }),
      'INVALID_REQUEST',
      /sequences\[0\]\.tokens\[0\]/,
    ],
    [
      'update NaN advantage',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ advantages: [0.1, NaN] })] }),
      'INVALID_REQUEST',
      /samples\[0\]\.advantages\[1\]: must be finite, got NaN/,
    ],
    [
      'update NaN weight',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample(), sample({ lossWeights: [NaN, 1] })] }),
      'INVALID_REQUEST',
      /samples\[1\]\.loss_weights\[0\]/,
    ],
    [
      'update negative weight',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ lossWeights: [-1, 1] })] }),
      'INVALID_REQUEST',
      /loss_weights\[0\]: must be >= 0/,
    ],
    [
      'update mismatched lengths',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ oldLogprobs: [-1] })] }),
      'INVALID_REQUEST',
      /samples\[0\]\.old_logprobs: has 1 entries, expected 2/,
    ],
    [
      'update ref length',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ refLogprobs: [-1, -1, -1] })] }),
      'INVALID_REQUEST',
      /ref_logprobs: has 3 entries/,
    ],
    [
      'update mask not 0/1',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ lossMask: [1, 2] })] }),
      'INVALID_REQUEST',
      /loss_mask\[1\]: must be 0 or 1/,
    ],
    [
      'update nothing trained',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample({ lossMask: [0, 0] })] }),
      'INVALID_REQUEST',
      /no trained tokens/,
    ],
    ['update empty batch', () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [] }), 'INVALID_REQUEST', /samples: empty batch/],
    [
      'update no request id',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: '', samples: [sample()] }),
      'INVALID_REQUEST',
      /request_id: required/,
    ],
    [
      'update bad setting',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample()], settings: { beta2: 1 } }),
      'INVALID_REQUEST',
      /settings\.beta2: must be in \[0, 1\)/,
    ],
    [
      'update bad dual clip',
      () => engine.update({ modelKey: 'm', baseVersion: 0, requestId: 'a', samples: [sample()], settings: { dualClip: 0.5 } }),
      'INVALID_REQUEST',
      /settings\.dual_clip\b/,
    ],
    ['update unknown base', () => engine.update({ modelKey: 'm', baseVersion: 5, requestId: 'a', samples: [sample()] }), 'VERSION_NOT_LOADED', /version 5/],
    ['spec missing vocab', () => engine.initModel({ modelKey: 'x', spec: { vocabSize: 0 }, seed: 1 }), 'INVALID_REQUEST', /spec\.vocabSize/],
    [
      'different spec for a model',
      () => engine.initModel({ modelKey: 'm', spec: { ...SPEC, hiddenDim: 17 }, seed: 1 }),
      'VERSION_CONFLICT',
      /model "m" is loaded with spec/,
    ],
    [
      'different init seed',
      () => engine.initModel({ modelKey: 'm', spec: SPEC, seed: 2 }),
      'VERSION_CONFLICT',
      /version 0 already exists here with different weights/,
    ],
    [
      'weights of the wrong size',
      () => engine.loadVersion({ modelKey: 'm', version: 1, spec: SPEC, weights: new Uint8Array(12) }),
      'INVALID_REQUEST',
      /weights: expected \d+ bytes/,
    ],
    [
      'weights sha mismatch',
      () => engine.loadVersion({ modelKey: 'm', version: 1, spec: SPEC, weights: encodeWeights(initWeights(normalizeSpec(SPEC), 1)), weightsSha256: 'ab' }),
      'INVALID_REQUEST',
      /weights_sha256/,
    ],
    [
      'non-finite weights',
      () => engine.loadVersion({ modelKey: 'm', version: 1, spec: SPEC, weights: encodeWeights(initWeights(normalizeSpec(SPEC), 1).fill(NaN, 3, 4)) }),
      'INVALID_REQUEST',
      /parameter 3 is not finite/,
    ],
    [
      'garbage optimizer state',
      () =>
        engine.loadVersion({
          modelKey: 'm',
          version: 1,
          spec: SPEC,
          weights: encodeWeights(initWeights(normalizeSpec(SPEC), 1)),
          optimizerState: new Uint8Array(40),
        }),
      'INVALID_REQUEST',
      /optimizer_state: not a troupe AdamW state/,
    ],
    [
      'overwrite version 0',
      () => engine.loadVersion({ modelKey: 'm', version: 0, spec: SPEC, weights: encodeWeights(initWeights(normalizeSpec(SPEC), 9)) }),
      'VERSION_CONFLICT',
      /immutable/,
    ],
  ];
  for (const [name, call, reason, message] of cases) {
    let err: unknown;
    try {
      await call();
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof EngineFault, `${name}: expected an EngineFault, got ${String(err)}`);
    assert.equal(err.reason, reason, `${name}: ${err.message}`);
    assert.match(err.message, message, name);
  }
  // Nothing changed, and the engine still serves.
  const stats = await engine.stats();
  assert.equal(stats.models.length, 1);
  assert.deepEqual(stats.models[0]!.versions, [0]);
  assert.deepEqual(await engine.initModel({ modelKey: 'm', spec: SPEC, seed: 1 }), info, 'InitModel is idempotent');
  const ok = await engine.generate(gen());
  assert.equal(ok.sequences[0]!.tokens.length, 3);
});

test('a transformer with the smallest maxSeq initializes (its probe fits), and a turn past maxSeq is INVALID_REQUEST naming the sequence', async () => {
  const engine = cpuEngine();
  for (const maxSeq of [2, 3]) {
    const spec = { family: 'transformer', vocabSize: 8, width: 8, layers: 1, heads: 2, maxSeq };
    await engine.initModel({ modelKey: `t${maxSeq}`, spec, seed: 1 });
    await assert.rejects(
      engine.generate({ modelKey: `t${maxSeq}`, version: 0, sequences: [{ context: [1, 2], seed: 1 }], sampling: { maxTokens: maxSeq } }),
      (e: unknown) =>
        e instanceof EngineFault &&
        e.reason === 'INVALID_REQUEST' &&
        e.message === `sequences[0]: context + tokens = ${maxSeq + 2} exceeds the model's maxSeq ${maxSeq}`,
    );
  }
});
