/**
 * Team definitions are checked when defined: tools that were not built with
 * defineTool and tool syntaxes that name an unknown tool or print characters
 * the tokenizer lacks are refused with their path, not found episode by episode.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { z } from 'zod';
import { agent, charTokenizer, defineTeam, defineTool, generatedTasks, keySyntax, TeamDefinitionError, tinyLM, transformer } from '../../../agents';
import type { Tool, ToolSyntax } from '../../../agents/tool';
import { FieldError } from '../../../infra/issues';

const tokenizer = charTokenizer('0123456789+=?E');
const calculator = defineTool({
  name: 'calculator',
  description: 'adds',
  input: z.object({ expr: z.string() }),
  output: z.object({ value: z.number() }),
  execute: async ({ expr }) => ({
    value: expr
      .split('+')
      .map(Number)
      .reduce((a, b) => a + b),
  }),
  render: ({ value }) => String(value),
});

function team(tools: unknown[], toolSyntax: ToolSyntax) {
  return defineTeam({
    name: 'checked',
    tokenizer,
    models: { policy: tinyLM({ tokenizer }) },
    toolSyntax,
    agents: { solver: agent({ model: 'policy', tools: tools as Tool[], maxTokens: 3, maxToolCalls: 1 }) },
    tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode: async ({ agents }) => (await agents.solver.act('1+1')).reply,
    rewards: { solver: () => ({ r: 1 }) },
    success: () => true,
  });
}

const issuesOf = (fn: () => unknown): string[] => {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof TeamDefinitionError, String(e));
    assert.ok(e instanceof FieldError);
    return e.problems;
  }
  assert.fail('expected a TeamDefinitionError');
};

const syntax = (over: Partial<Parameters<typeof keySyntax>[0]> = {}) =>
  keySyntax({ trigger: '=', tool: 'calculator', argument: 'expr', separators: '?', error: 'E', ...over });

test('a well-formed team passes', () => {
  assert.equal(team([calculator], syntax()).name, 'checked');
});

test('a tool not built with defineTool is refused by path', () => {
  const handMade = { name: 'calculator', description: 'adds', execute: async () => ({ value: 1 }) };
  assert.deepEqual(
    issuesOf(() => team([handMade], syntax())),
    [
      'agents.solver.tools[0].input: must be a zod schema (build tools with defineTool)',
      'agents.solver.tools[0].output: must be a zod schema (build tools with defineTool)',
      'agents.solver.tools[0].render: must be a function (build tools with defineTool)',
      'agents.solver.tools[0].timeoutMs: must be a number > 0, got undefined',
      'toolSyntax.tool: unknown tool "calculator" (the agents\' tools: none)',
    ],
  );
  assert.deepEqual(
    issuesOf(() => team([calculator, 'calculator'], syntax())),
    ['agents.solver.tools[1]: not a tool (use defineTool), got "calculator"'],
  );
});

test('a keySyntax naming an unknown tool or an error outside the vocabulary is refused by path', () => {
  assert.deepEqual(
    issuesOf(() => team([calculator], syntax({ tool: 'calc' }))),
    ['toolSyntax.tool: unknown tool "calc" (the agents\' tools: calculator)'],
  );
  assert.deepEqual(
    issuesOf(() => team([calculator], syntax({ error: 'X' }))),
    ['toolSyntax.error: tokenizer: character "X" is not in the vocabulary "0123456789+=?E"'],
  );
});

test('defineTool names the field of a bad tool', () => {
  assert.throws(() => defineTool({ ...calculator, input: undefined as never }), {
    name: 'FieldError',
    message: 'tools.calculator.input: must be a zod schema (build tools with defineTool)',
  });
  assert.throws(() => defineTool({ ...calculator, name: 'Calc' }), /^FieldError: tool\.name: must match/);
  assert.throws(() => defineTool({ ...calculator, timeoutMs: 0 }), { message: 'tools.calculator.timeoutMs: must be a number > 0, got 0' });
});

test("maxTokens past the engines' limit, or a first turn that cannot fit maxSeq, is refused when the team is defined", () => {
  const define = (maxTokens: number, maxSeq: number, instructions = '') =>
    defineTeam({
      name: 'lengths',
      tokenizer,
      models: { policy: transformer({ tokenizer, width: 8, layers: 1, heads: 2, maxSeq }) },
      agents: { solver: agent({ model: 'policy', maxTokens, instructions }) },
      tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
      episode: async ({ agents }) => (await agents.solver.act('1+1')).reply,
      rewards: { solver: () => ({ r: 1 }) },
      success: () => true,
    });
  assert.deepEqual(
    issuesOf(() => define(1e9, 64)),
    ["agents.solver.maxTokens: must be at most 4096 (the engines' limit per generation), got 1000000000"],
  );
  // BOS + 10 instruction tokens + 8 sampled = 19 > 16
  assert.deepEqual(
    issuesOf(() => define(8, 16, '0123456789')),
    [
      "agents.solver.maxTokens: its shortest context (11 tokens: BOS and its instructions, empty message) + maxTokens 8: context + tokens = 19 exceeds the model's maxSeq 16 (models.policy); lower maxTokens, shorten the instructions or raise maxSeq",
    ],
  );
  assert.deepEqual(
    issuesOf(() => define(4, 1)),
    ['models.policy.maxSeq: must be ≥ 2'],
  );
  // exactly full: BOS + 10 + 5 = 16
  assert.equal(define(5, 16, '0123456789').name, 'lengths');
});

test('a tool without render whose JSON output the tokenizer cannot write is refused at load, naming the tool and render', () => {
  const json = defineTool({ ...calculator, render: undefined });
  assert.deepEqual(
    issuesOf(() => team([json], syntax())),
    [
      'agents.solver.tools[0].render: the tool has none, so its output is written as JSON ({"value":0}), and tokenizer: character "{" is not in the vocabulary "0123456789+=?E": give it a render that writes what the tokenizer can',
    ],
  );
  // a vocabulary that holds the JSON's punctuation and keys passes; digits vary by value and are not required
  const wide = charTokenizer('{}":,valuexpr+=?E');
  const ok = defineTeam({
    name: 'json-tools',
    tokenizer: wide,
    models: { policy: tinyLM({ tokenizer: wide }) },
    toolSyntax: keySyntax({ trigger: '=', tool: 'calculator', argument: 'expr', separators: '?', error: 'E' }),
    agents: { solver: agent({ model: 'policy', tools: [json], maxTokens: 3, maxToolCalls: 1 }) },
    tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode: async ({ agents }) => (await agents.solver.act('+')).reply,
    rewards: { solver: () => ({ r: 1 }) },
    success: () => true,
  });
  assert.equal(ok.name, 'json-tools');
});

test("a team's run defaults are checked by path", () => {
  const withRun = (run: unknown) => () => defineTeam({ ...team([calculator], syntax()), run: run as never });
  assert.deepEqual(issuesOf(withRun({ steps: 0, groupsPerStep: 2.5, evalEvery: -1, lr: 0.1 })), [
    'run.steps: must be an integer >= 1, got 0',
    'run.groupsPerStep: must be an integer >= 1, got 2.5',
    'run.evalEvery: must be an integer >= 0, got -1',
    'run.lr: unknown field (a team may default steps, groupsPerStep, groupSize, evalEvery)',
  ]);
  assert.deepEqual(withRun({ steps: 60, evalEvery: 0 })().run, { steps: 60, evalEvery: 0 });
});
