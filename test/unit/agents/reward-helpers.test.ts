// Reward helpers (agents/reward-helpers.ts) against hand-computed values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { exactMatch, lastNumber, normalizeAnswer, numericMatch, onLastTurn, tokenF1 } from '../../../agents/reward-helpers';
import type { TurnView } from '../../../agents/team';

test('normalizeAnswer and exactMatch: case, inner and outer whitespace, one trailing period', () => {
  assert.equal(normalizeAnswer('  The  Cat\tsat. '), 'the cat sat');
  assert.equal(normalizeAnswer('e.g..'), 'e.g.');
  assert.equal(exactMatch('Paris.', ' paris'), 1);
  assert.equal(exactMatch('Paris', 'Parisian'), 0);
});

test('lastNumber: signs, decimals, thousands separators, none', () => {
  assert.equal(lastNumber('3 apples and 12 pears'), 12);
  assert.equal(lastNumber('it is -7.25 today'), -7.25);
  assert.equal(lastNumber('total: 1,024 tokens'), 1024);
  assert.equal(lastNumber('about .5 of it'), 0.5);
  assert.equal(lastNumber('answer: 42.'), 42);
  assert.equal(lastNumber('no digits - here.'), undefined);
});

test('numericMatch: the last number against the reference, within an absolute tolerance', () => {
  assert.equal(numericMatch('5 + 7 = 12', 12), 1);
  assert.equal(numericMatch('12 or maybe 13', 12), 0);
  assert.equal(numericMatch('3.14159', 3.14, 0.01), 1);
  assert.equal(numericMatch('3.16', 3.14, 0.01), 0);
  assert.equal(numericMatch('no idea', 0), 0);
});

test('tokenF1: multiset overlap, hand-computed', () => {
  // pred [the, cat, sat], ref [a, cat, sat, down]: common 2, P = 2/3, R = 1/2, F1 = (2/3)/(7/6) = 4/7
  assert.ok(Math.abs(tokenF1('The cat sat', 'a cat sat down') - 4 / 7) < 1e-15);
  // repeated tokens count once each: pred [a, a, b], ref [a, b, b]: common 2 (one a, one b), P = R = 2/3
  assert.ok(Math.abs(tokenF1('a a b', 'a b b') - 2 / 3) < 1e-15);
  assert.equal(tokenF1('same words', 'Same  words.'), 1);
  assert.equal(tokenF1('x', 'y'), 0);
  assert.equal(tokenF1('', ''), 1);
  assert.equal(tokenF1('', 'y'), 0);
});

test("onLastTurn: the role's last turn keeps its reward, its earlier turns get the same components at 0, other roles unaffected", () => {
  const turn = (index: number, agent: string): TurnView => ({ index, agent, text: '', reply: '', toolCalls: [], stopReason: 'stop' });
  const turns = [turn(0, 'a'), turn(1, 'b'), turn(2, 'a'), turn(3, 'b')];
  const reward = onLastTurn<null, number>(({ outcome }) => ({ correct: outcome ?? 0, bonus: 0.5 }));
  const at = (i: number) => reward({ task: null, outcome: 1, status: 'completed', turn: turns[i]!, turns });
  assert.deepEqual(at(0), { correct: 0, bonus: 0 });
  assert.deepEqual(at(2), { correct: 1, bonus: 0.5 });
  assert.deepEqual(at(1), { correct: 0, bonus: 0 });
  assert.deepEqual(at(3), { correct: 1, bonus: 0.5 });
});

test('onLastTurn keeps the parts of a split reward, zeroed on earlier turns', () => {
  const turn = (index: number): TurnView => ({ index, agent: 'a', text: '', reply: '', toolCalls: [], stopReason: 'stop' });
  const turns = [turn(0), turn(1)];
  const reward = onLastTurn<null, number>(() => ({ episode: { correct: 1 }, turn: { step: 0.25 } }));
  assert.deepEqual(reward({ task: null, outcome: 1, status: 'completed', turn: turns[0]!, turns }), { episode: { correct: 0 }, turn: { step: 0 } });
  assert.deepEqual(reward({ task: null, outcome: 1, status: 'completed', turn: turns[1]!, turns }), { episode: { correct: 1 }, turn: { step: 0.25 } });
});
