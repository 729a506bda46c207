/**
 * The supervised stage (run config sft, activities/training/sft.ts): the dataset's filter, the seeded
 * batch, the update's sequences and cross-entropy rows, the run config, and the identity the update
 * rests on: the engines' PPO loss at ratio 1 with advantages 1 has the cross-entropy's gradient.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { StoredEpisode } from '../../../activities/store/trajectories';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  conversationTurns,
  jsonlTurns,
  sftRows,
  sftSelection,
  sftStepBatch,
  sftStepTurns,
  sftTurns,
  turnReward,
  withBaseLogprobs,
  type SftTurn,
} from '../../../activities/training/sft';
import { loadTeam } from '../../../agents/team-registry';
import { curves } from '../../../activities/store/plot';
import { sftInput } from '../../../cli/commands/train';
import { policyLoss } from '../../../rl/loss-reference';
import { lineageLines, lineageOf, parseRunConfig, RunConfigError } from '../../../schema/run-config';
import { resolveSettings } from '../../../schema/optimizer';

const DEFAULT_SETTINGS = resolveSettings({}, {});

type Status = 'completed' | 'truncated' | 'failed';

/** An episode with a solver turn (reward `solver`) and a verifier turn (reward 1), of step `step`. */
function episode(id: string, step: number, group: number, status: Status, solver: number, success: boolean | null = null): StoredEpisode {
  const turn = (index: number, agent: string, mask: Array<0 | 1>) => ({
    index,
    agent,
    model: 'policy',
    version: 0,
    parents: index === 0 ? [] : [0],
    contextTokens: [1, index + 10],
    responseTokens: mask.map((_, k) => 20 + k),
    logprobs: mask.map(() => -1),
    lossMask: mask,
    stopReason: 'eos' as const,
    toolCalls: [],
    durationMs: 1,
  });
  return {
    meta: { episodeId: id, runId: 'teacher', step, split: 'train', taskId: 't', task: {}, groupIndex: group, episodeIndex: 0, seed: 1, mode: 'batched' },
    trajectory: { episodeId: id, status, turns: [turn(0, 'solver', [1, 0, 1]), turn(1, 'verifier', [1])] },
    rewards: [
      { turn: 0, agent: 'solver', components: { correct: solver, format: 0.5 } },
      { turn: 1, agent: 'verifier', components: { agree: 1 } },
    ],
    success,
  };
}

const from = (f: Record<string, unknown> = {}) => ({ run: 'teacher', split: 'train' as const, completedOnly: true, successOnly: false, ...f });

describe('sft dataset', () => {
  const episodes = [
    episode('b', 1, 0, 'completed', 1, true),
    episode('a', 0, 1, 'completed', 0, false),
    episode('c', 0, 0, 'truncated', 1),
    episode('d', 0, 2, 'failed', 1),
  ];
  const both = new Set(['solver', 'verifier']);

  it("a turn's reward is the sum of its components", () => {
    assert.equal(turnReward(episodes[0]!, 0), 1.5);
    assert.equal(turnReward(episodes[1]!, 0), 0.5);
    assert.equal(turnReward(episodes[0]!, 7), 0);
  });

  it('keeps completed episodes in (step, group, episode, turn) order, never failed ones', () => {
    assert.deepEqual(
      sftTurns(episodes, from(), both).map((t) => t.id),
      ['a#0', 'a#1', 'b#0', 'b#1'],
    );
    assert.deepEqual(
      sftTurns(episodes, from({ completedOnly: false }), both).map((t) => t.id),
      ['c#0', 'c#1', 'a#0', 'a#1', 'b#0', 'b#1'],
    );
  });

  it('filters by success, by the turn’s own reward, and by agent', () => {
    assert.deepEqual(
      sftTurns(episodes, from({ successOnly: true }), both).map((t) => t.id),
      ['b#0', 'b#1'],
    );
    // solver turns: a 0.5, b 1.5; verifier turns 1
    assert.deepEqual(
      sftTurns(episodes, from({ minReward: 1 }), both).map((t) => t.id),
      ['a#1', 'b#0', 'b#1'],
    );
    assert.deepEqual(
      sftTurns(episodes, from({ minReward: 1.5 }), new Set(['solver'])).map((t) => t.id),
      ['b#0'],
    );
    const t = sftTurns(episodes, from({ minReward: 1.5 }), new Set(['solver']))[0]!;
    assert.deepEqual([t.agent, t.context, t.tokens, t.mask], ['solver', [1, 10], [20, 21, 22], [1, 0, 1]]);
  });

  it('leaves out turns without a trained token', () => {
    const e = episode('x', 0, 0, 'completed', 1);
    e.trajectory.turns[1]!.lossMask = [0];
    assert.deepEqual(
      sftTurns([e], from(), both).map((t) => t.id),
      ['x#0'],
    );
  });
});

describe('sft batch selection', () => {
  it('draws `size` distinct turns from (seed, step) only, in dataset order', () => {
    const a = sftSelection(100, 10, 7, 3);
    assert.deepEqual(a, sftSelection(100, 10, 7, 3), 'a retried activity draws the same batch');
    assert.equal(new Set(a).size, 10);
    assert.ok(a.every((i) => Number.isInteger(i) && i >= 0 && i < 100));
    assert.deepEqual(
      a,
      [...a].sort((x, y) => x - y),
    );
    assert.notDeepEqual(a, sftSelection(100, 10, 7, 4), 'another step, another batch');
    assert.notDeepEqual(a, sftSelection(100, 10, 8, 3), 'another seed, another batch');
  });

  it('takes every turn when the batch is not smaller than the dataset', () => {
    assert.deepEqual(sftSelection(3, 3, 0, 0), [0, 1, 2]);
    assert.deepEqual(sftSelection(3, 64, 0, 5), [0, 1, 2]);
  });

  it('covers the dataset evenly over many steps', () => {
    const seen = new Array<number>(20).fill(0);
    for (let step = 0; step < 400; step++) for (const i of sftSelection(20, 5, 1, step)) seen[i]!++;
    // 400 × 5 / 20 = 100 each on average
    assert.ok(
      seen.every((n) => n > 60 && n < 140),
      String(seen),
    );
  });

  it('an empty dataset fails the run naming sft.from', () => {
    assert.throws(() => sftStepTurns([], { from: from(), batch: 4 }, 0, 0), /^ApplicationFailure: sft\.from: no turn of run teacher passes the filter/);
  });
});

describe('sft update sequences and cross-entropy', () => {
  const team = { agents: { solver: { model: 'policy' }, verifier: { model: 'policy' }, judge: { model: 'other' } } };
  const turns: SftTurn[] = [
    { id: 'a#0', agent: 'solver', context: [1], tokens: [5, 6, 7], mask: [1, 0, 1] },
    { id: 'a#1', agent: 'verifier', context: [1, 2], tokens: [8], mask: [1] },
  ];
  const models = { policy: DEFAULT_SETTINGS, other: DEFAULT_SETTINGS };

  it("gives advantage 1 on trained tokens and the model's token-mean weights", () => {
    const b = sftStepBatch(turns, team as never, models);
    assert.deepEqual(b.models.other, []);
    const [s, v] = b.models.policy!;
    assert.deepEqual([s!.agent, s!.context, s!.tokens, s!.mask, s!.advantages], ['solver', [1], [5, 6, 7], [1, 0, 1], [1, 0, 1]]);
    assert.deepEqual(s!.weights, [1 / 3, 0, 1 / 3]);
    assert.deepEqual([v!.advantages, v!.weights], [[1], [1 / 3]]);
    assert.equal(b.counts.samples, 2);
  });

  it('records the cross-entropy per agent (token mean) and per model (the loss the update minimises)', () => {
    const b = sftStepBatch(turns, team as never, models);
    const seqs = withBaseLogprobs(b.models.policy!, [[-1, -5, -2], [-0.5]]);
    assert.deepEqual(seqs[0]!.oldLogprobs, [-1, -5, -2]);
    const rows = Object.fromEntries(sftRows('policy', seqs).map((r) => [`${r.kind}/${r.scope}/${r.name}`, r.value]));
    assert.deepEqual(rows, {
      // (1 + 2 + 0.5) / 3: the masked-out token (-5) does not count
      'update/policy/sft.ce': 3.5 / 3,
      'train/solver/sft.ce': 1.5,
      'train/solver/sft.turns': 1,
      'train/solver/sft.tokens': 2,
      'train/verifier/sft.ce': 0.5,
      'train/verifier/sft.turns': 1,
      'train/verifier/sft.tokens': 1,
    });
  });
});

describe('sft curves', () => {
  it("troupe plot draws the cross-entropy per agent and model after each step's update", () => {
    const rows = [
      { step: 0, kind: 'train', scope: 'solver', name: 'sft.ce', value: 2 },
      { step: 0, kind: 'update', scope: 'policy', name: 'sft.ce', value: 1.5 },
      { step: 0, kind: 'train', scope: 'solver', name: 'sft.turns', value: 4 },
    ];
    assert.deepEqual(curves(rows).sft, [
      { step: 1, series: 'solver', value: 2 },
      { step: 1, series: 'policy (model)', value: 1.5 },
    ]);
    assert.deepEqual(curves([]).sft, []);
  });
});

describe("the PPO loss at ratio 1 with advantages 1 is cross-entropy's gradient", () => {
  // three positions over a vocabulary of four, with the sampled tokens and weights of a turn
  const logits = [
    [0.3, -1.2, 0.8, 0.1],
    [1.5, 0.2, -0.4, 0.0],
    [-0.7, 0.9, 0.4, -1.1],
  ];
  const tokens = [2, 0, 1];
  const weights = [0.25, 0.5, 0.25];
  const logSoftmax = (z: number[]) => {
    const m = Math.max(...z);
    const lse = m + Math.log(z.reduce((s, x) => s + Math.exp(x - m), 0));
    return z.map((x) => x - lse);
  };
  const logpOf = (z: number[][]) => z.map((row, t) => logSoftmax(row)[tokens[t]!]!);
  const base = logpOf(logits);
  const ce = (z: number[][]) => -logpOf(z).reduce((s, lp, t) => s + weights[t]! * lp, 0);
  // the engine's objective with the base version's log-probs held as the old ones
  const ppo = (z: number[][], settings = {}) =>
    policyLoss({ logp: logpOf(z), logpOld: base, advantages: [1, 1, 1], weights }, { clipLow: 0.2, clipHigh: 0.28, ...settings }).loss;
  const numeric = (f: (z: number[][]) => number) =>
    logits.map((row, t) =>
      row.map((_, k) => {
        const h = 1e-6;
        const plus = logits.map((r) => [...r]);
        const minus = logits.map((r) => [...r]);
        plus[t]![k]! += h;
        minus[t]![k]! -= h;
        return (f(plus) - f(minus)) / (2 * h);
      }),
    );

  it('has ratio 1, no clipping, and the loss value −Σ w (ratio 1)', () => {
    const out = policyLoss({ logp: base, logpOld: base, advantages: [1, 1, 1], weights });
    assert.equal(out.diagnostics.clipFraction, 0);
    assert.equal(out.diagnostics.ratioMean, 1);
    assert.ok(Math.abs(out.loss + 1) < 1e-12);
    // g_t = ∂loss/∂logp_t = −w_t: the cross-entropy's coefficient
    assert.deepEqual(Array.from(out.grad), [-0.25, -0.5, -0.25]);
  });

  it('matches the cross-entropy gradient in the logits, by finite differences', () => {
    const a = numeric(ce);
    const b = numeric((z) => ppo(z));
    // and the reference's analytic coefficient through log-softmax: g_t·(onehot − softmax)
    const g = policyLoss({ logp: base, logpOld: base, advantages: [1, 1, 1], weights }).grad;
    const analytic = logits.map((row, t) => {
      const p = logSoftmax(row).map(Math.exp);
      return row.map((_, k) => g[t]! * ((k === tokens[t] ? 1 : 0) - p[k]!));
    });
    for (let t = 0; t < 3; t++)
      for (let k = 0; k < 4; k++) {
        assert.ok(Math.abs(a[t]![k]! - b[t]![k]!) < 1e-6, `ppo vs ce at ${t},${k}: ${b[t]![k]} vs ${a[t]![k]}`);
        assert.ok(Math.abs(a[t]![k]! - analytic[t]![k]!) < 1e-6, `analytic vs ce at ${t},${k}`);
      }
  });

  it('holds with a dual clip too (it binds only for negative advantages)', () => {
    const a = numeric(ce);
    const b = numeric((z) => ppo(z, { dualClip: 3 }));
    for (let t = 0; t < 3; t++) for (let k = 0; k < 4; k++) assert.ok(Math.abs(a[t]![k]! - b[t]![k]!) < 1e-6);
  });
});

describe('run config sft', () => {
  it('fills the defaults and shows in the lineage', () => {
    const c = parseRunConfig({ team: 'math', sft: { from: { run: 'teacher', minReward: 1 } } });
    assert.deepEqual(c.sft, { from: { run: 'teacher', split: 'train', completedOnly: true, successOnly: false, minReward: 1 }, batch: 64 });
    assert.deepEqual(lineageLines(lineageOf(c)), ['SFT from run teacher (train episodes, completed, turn reward >= 1), 64 turns a step']);
    const e = parseRunConfig({ team: 'math', sft: { from: { run: 't', split: 'eval', completedOnly: false, successOnly: true, steps: { to: 3 } }, batch: 8 } });
    assert.deepEqual(lineageLines(lineageOf(e)), ['SFT from run t (eval episodes, steps 0-3, successful), 8 turns a step']);
  });

  const issues = (raw: Record<string, unknown>) => {
    try {
      parseRunConfig({ team: 'math', ...raw });
    } catch (e) {
      if (e instanceof RunConfigError) return e.issues.map((i) => `${i.path}: ${i.message}`);
      throw e;
    }
    return [];
  };

  it('names the bad field', () => {
    assert.deepEqual(issues({ sft: { from: {} } }), ['sft.from.run: Invalid input: expected string, received undefined']);
    assert.deepEqual(issues({ sft: { from: { run: 't' }, batch: 0 } }), ['sft.batch: must be >= 1']);
    assert.deepEqual(issues({ sft: { from: { run: 't', steps: { from: 3, to: 1 } } } }), ['sft.from.steps: from must be <= to']);
    assert.deepEqual(issues({ sft: { from: { run: 't', reward: 1 } } }), ['sft.from.reward: unknown field']);
  });

  it('refuses what needs a rollout', () => {
    assert.deepEqual(issues({ sft: { from: { run: 't' } }, staleness: 1 }), ['sft: an SFT run has no rollout: staleness must be 0']);
    assert.deepEqual(issues({ sft: { from: { run: 't' } }, partialRollouts: {} }), [
      'sft: an SFT run has no rollout: partialRollouts does not apply (give one of them)',
    ]);
  });
});

describe('sft from a JSONL file of conversations', () => {
  const math = loadTeam('math', {});
  const digits = loadTeam('chat-digits', {});

  it('renders a turn as an episode does without a chat template: BOS, instructions, the message; the reply and EOS trained', () => {
    // math's characters: 0-9 are ids 3-12, + 13, = 14; BOS 1, EOS 2; its agents have no instructions
    assert.deepEqual(
      conversationTurns(
        math,
        {
          agent: 'solver',
          messages: [
            { role: 'user', content: '12+7' },
            { role: 'assistant', content: '=' },
          ],
        },
        'c',
      ),
      [{ id: 'c#0', agent: 'solver', context: [1, 4, 5, 13, 10], tokens: [14, 2], mask: [1, 1] }],
    );
  });

  it("renders turns with the team's chat template: a later turn continues the earlier one's tokens", () => {
    // chat-digits' template: a user message is its text and '=', an assistant's its text; 0-9 are 3-12, ? 13, = 14
    const turns = conversationTurns(
      digits,
      {
        agent: 'reader',
        messages: [
          { role: 'user', content: '34' },
          { role: 'assistant', content: '3' },
          { role: 'user', content: '?' },
          { role: 'assistant', content: '4' },
        ],
      },
      'c',
    );
    assert.deepEqual(turns, [
      { id: 'c#0', agent: 'reader', context: [6, 7, 14], tokens: [6, 2], mask: [1, 1] },
      { id: 'c#1', agent: 'reader', context: [6, 7, 14, 6, 2, 13, 14], tokens: [7, 2], mask: [1, 1] },
    ]);
  });

  it('reads a file, and refuses a bad line naming it', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-sft-'));
    try {
      const file = path.join(dir, 'd.jsonl');
      const line = (agent: string, answer: string) =>
        JSON.stringify({
          agent,
          messages: [
            { role: 'user', content: '1+1' },
            { role: 'assistant', content: answer },
          ],
        });
      fs.writeFileSync(file, [line('solver', '2'), '', line('verifier', 'Y')].join('\n') + '\n');
      assert.deepEqual(
        jsonlTurns(file, ['solver', 'verifier'], math).map((t) => [t.agent, t.tokens]),
        [
          ['solver', [5, 2]],
          ['verifier', [16, 2]],
        ],
      );
      const refused = (text: string, agents = ['solver', 'verifier']) => {
        fs.writeFileSync(file, text);
        try {
          jsonlTurns(file, agents, math);
        } catch (e) {
          return (e as Error).message;
        }
        return 'accepted';
      };
      assert.equal(refused(`${line('solver', '2')}\n{`), 'sft.jsonl: line 2: not JSON');
      assert.equal(refused(line('verifier', 'Y'), ['solver']), 'sft.jsonl: line 1: agent "verifier" is not an agent of this run\'s trained models (solver)');
      assert.equal(refused(line('solver', 'x')), 'sft.jsonl: line 1: tokenizer: character "x" is not in the vocabulary "0123456789+=?YNE"');
      assert.equal(
        refused(JSON.stringify({ agent: 'solver', messages: [{ role: 'user', content: '1' }] })),
        'sft.jsonl: line 1: no assistant message: nothing to train on',
      );
      assert.equal(
        refused(JSON.stringify({ agent: 'solver', messages: [{ role: 'bot', content: '1' }] })),
        'sft.jsonl: line 1: messages[0]: must be {"role": system|user|assistant|tool, "content": "<text>"}',
      );
      assert.match(refused('', []).toString(), /^accepted$/);
      assert.match(jsonlTurnsError(path.join(dir, 'none.jsonl'), math), /^sft\.jsonl: cannot read .*none\.jsonl/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the run config takes jsonl or from, not both, and the CLI flags make it', () => {
    assert.deepEqual(parseRunConfig({ team: 'math', sft: { jsonl: '/data/d.jsonl' } }).sft, { jsonl: '/data/d.jsonl', batch: 64 });
    assert.deepEqual(lineageLines(lineageOf(parseRunConfig({ team: 'math', sft: { jsonl: '/d.jsonl', batch: 4 } }))), ['SFT from /d.jsonl, 4 turns a step']);
    const issues = (sft: unknown) => {
      try {
        parseRunConfig({ team: 'math', sft });
      } catch (e) {
        if (e instanceof RunConfigError) return e.issues.map((i) => `${i.path}: ${i.message}`);
        throw e;
      }
      return [];
    };
    assert.deepEqual(issues({ jsonl: '/d', from: { run: 't' } }), ["sft: give one of from (a run's episodes) or jsonl (a file of conversations)"]);
    assert.deepEqual(issues({ jsonl: 'd.jsonl' }), ['sft.jsonl: must be an absolute path (the workers may run in another directory)']);

    assert.deepEqual(sftInput({ 'sft-from': 'teacher', 'sft-min-reward': 1, 'sft-batch': 8 }, undefined), { from: { run: 'teacher', minReward: 1 }, batch: 8 });
    assert.deepEqual(sftInput({ 'sft-jsonl': 'd.jsonl' }, undefined), { jsonl: path.resolve('d.jsonl') });
    assert.deepEqual(sftInput({ 'sft-batch': 8 }, { from: { run: 't', minReward: 2 } }), { from: { run: 't', minReward: 2 }, batch: 8 });
    assert.equal(sftInput({}, undefined), undefined);
    assert.throws(() => sftInput({ 'sft-min-reward': 1 }, undefined), /^TroupeError: --sft-min-reward: only with --sft-from <run> or --sft-jsonl <file>/);
    assert.throws(
      () => sftInput({ 'sft-jsonl': 'd', 'sft-min-reward': 1 }, undefined),
      /--sft-min-reward: only with --sft-from <run> \(a JSONL file has no rewards\)/,
    );
    assert.throws(() => sftInput({ 'sft-jsonl': 'd', 'sft-from': 't' }, undefined), /--sft-jsonl: give --sft-from or --sft-jsonl, not both/);
  });
});

function jsonlTurnsError(file: string, team: ReturnType<typeof loadTeam>): string {
  try {
    jsonlTurns(file, ['solver'], team);
  } catch (e) {
    return (e as Error).message;
  }
  return 'accepted';
}
