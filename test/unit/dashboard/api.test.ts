// The dashboard API's pure parts: the turn graph of an episode and query-parameter parsing.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ApiError, enumParam, intParam, numberParam, tokenPieces, turnGraph } from '../../../dashboard/api';
import { charTokenizer } from '../../../agents/tokenizer';

describe('dashboard turnGraph', () => {
  it('has a node per turn and tool call, an edge per after and per call', () => {
    // planner(0) → searcher(1, two tool calls, the second failed) → answerer(2, after 0 and 1)
    const g = turnGraph([
      { index: 0, agent: 'planner', parents: [], toolCalls: [] },
      {
        index: 1,
        agent: 'searcher',
        parents: [0],
        toolCalls: [
          { index: 0, tool: 'search' },
          { index: 1, tool: 'search', error: 'timeout' },
        ],
      },
      { index: 2, agent: 'answerer', parents: [0, 1], toolCalls: [] },
    ]);
    assert.deepEqual(
      g.nodes.map((n) => [n.id, n.kind, n.agent, n.label]),
      [
        ['t0', 'turn', 'planner', '0: planner'],
        ['t1', 'turn', 'searcher', '1: searcher'],
        ['t1c0', 'tool', 'searcher', 'search'],
        ['t1c1', 'tool', 'searcher', 'search (error)'],
        ['t2', 'turn', 'answerer', '2: answerer'],
      ],
    );
    assert.deepEqual(g.edges, [
      { from: 't0', to: 't1', kind: 'after' },
      { from: 't1', to: 't1c0', kind: 'call' },
      { from: 't1', to: 't1c1', kind: 'call' },
      { from: 't0', to: 't2', kind: 'after' },
      { from: 't1', to: 't2', kind: 'after' },
    ]);
  });
});

describe('dashboard parameters', () => {
  const q = (s: string) => new URLSearchParams(s);
  const fails = (f: () => unknown, message: RegExp) => assert.throws(f, (e: unknown) => e instanceof ApiError && e.status === 400 && message.test(e.message));
  it('parses integers in range, numbers and enums, naming the parameter when malformed', () => {
    assert.equal(intParam(q(''), 'limit', 100, 1, 1000), 100);
    assert.equal(intParam(q('limit=7'), 'limit', 100, 1, 1000), 7);
    fails(() => intParam(q('limit=7.5'), 'limit', 100, 1, 1000), /^limit: must be an integer, got "7.5"/);
    fails(() => intParam(q('limit=1e3'), 'limit', 100, 1, 1000), /^limit: must be an integer/);
    fails(() => intParam(q('limit=0'), 'limit', 100, 1, 1000), /^limit: must be between 1 and 1000, got 0/);
    assert.equal(numberParam(q('minReward=-0.5'), 'minReward'), -0.5);
    fails(() => numberParam(q('minReward=Infinity'), 'minReward'), /^minReward: must be a finite number/);
    assert.equal(enumParam(q('split=eval'), 'split', ['train', 'eval']), 'eval');
    fails(() => enumParam(q('split=Eval'), 'split', ['train', 'eval']), /^split: must be one of train, eval, got "Eval"/);
  });
  it('decodes each token on its own, special tokens by name', () => {
    const tok = charTokenizer('ab');
    assert.deepEqual(tokenPieces(tok, [1, 3, 4, 2, 0]), ['⟨bos⟩', 'a', 'b', '⟨eos⟩', '⟨pad⟩']);
  });
});
