/**
 * engines/families/transformer/lora.ts: initAdapter against the rule engines/pytorch/lora.py's init_adapter
 * states (the conformance check lora.init-is-base holds an engine's version 0 bytes against it).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fillUniforms, seedKey, STREAM_INIT } from '../../../engines/families/philox';
import { adapterLayout, initAdapter, mergeLora } from '../../../engines/families/transformer/lora';
import { paramLayout, normalizeTransformerSpec } from '../../../engines/families/transformer/spec';

const spec = normalizeTransformerSpec({
  vocabSize: 8,
  width: 8,
  layers: 2,
  heads: 2,
  kvHeads: 1,
  maxSeq: 8,
  positions: 'rope',
  norm: 'rmsnorm',
  mlp: 'swiglu',
  bias: false,
  lora: { rank: 2, alpha: 3, targets: ['q', 'v', 'd'] },
});
const { total: P } = paramLayout(spec);
const { total: Pa, slots } = adapterLayout(spec);
const base = Float32Array.from({ length: P }, (_, i) => Math.sin(0.7 * i));

test('initAdapter: B = 0, A = (2u − 1)/√in from Philox STREAM_INIT at the slot offsets, seeded', () => {
  const phi = initAdapter(spec, 99);
  assert.equal(phi.length, Pa);
  const u = new Float64Array(Pa);
  fillUniforms(seedKey(99), STREAM_INIT, Pa, u);
  let nonzero = 0;
  for (const slot of slots) {
    const bound = 1 / Math.sqrt(slot.shape[1]);
    for (let i = slot.offset; i < slot.offset + slot.size; i++) {
      if (slot.matrix === 'B') assert.equal(phi[i], 0, slot.name);
      else {
        assert.ok(Math.abs(phi[i]!) <= bound, `${slot.name}: |${phi[i]}| > 1/√${slot.shape[1]}`);
        assert.equal(phi[i], Math.fround((2 * u[i]! - 1) * bound), slot.name);
        if (phi[i] !== 0) nonzero++;
      }
    }
  }
  assert.ok(nonzero > Pa / 4);
  assert.notDeepEqual(Array.from(initAdapter(spec, 100)), Array.from(phi));
  // version 0 merges to the base exactly
  assert.deepEqual(Array.from(mergeLora(spec, base, phi)), Array.from(base));
});
