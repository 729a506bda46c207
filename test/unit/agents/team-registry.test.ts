/**
 * The team registry isolates teams: a team whose module throws (here a
 * definition error, as a user's typo would make) is unusable with its own
 * error and a user-error hint, while other teams and commands keep working.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { loadTeam, TeamLoadError, teamLoadErrors, teams } from '../../../agents/team-registry';
import { formatError } from '../../../infra/errors';
import { validateRunConfig } from '../../../control/runs';

const root = path.join(__dirname, '..', '..', '..');
// in the checkout's examples project, which the test process entered (not one of its teams)
const file = path.join(root, 'examples', `.broken-${process.pid}.ts`);

before(() => {
  // A definition error at module top level: `defineTeam` rejects a reward for a role no agent has.
  fs.writeFileSync(
    file,
    `import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from 'troupe';
const tokenizer = charTokenizer('ab');
export const broken = defineTeam({
  name: 'broken', tokenizer, models: { policy: tinyLM({ tokenizer }) },
  agents: { solver: agent({ model: 'policy', maxTokens: 1 }) },
  tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: 't' + i, data: {} }) }),
  async episode({ agents }) { await agents.solver.act('a'); return {}; },
  rewards: { solver: () => ({ r: 0 }), solvr: () => ({ r: 0 }) },
});
`,
  );
  teams.broken = () => (require(file) as { broken: ReturnType<typeof loadTeam> }).broken;
});
after(() => {
  delete teams.broken;
  fs.rmSync(file, { force: true });
});

it('a team whose module throws fails alone, as a user error naming the team and the problem', () => {
  assert.throws(
    () => loadTeam('broken'),
    (e: unknown) => {
      assert.ok(e instanceof TeamLoadError);
      assert.equal(e.team, 'broken');
      assert.match(e.message, /^team "broken" failed to load: team broken: rewards\.solvr: no agent has this role/);
      const printed = formatError(e);
      assert.match(printed, /→ fix the team's definition/);
      assert.doesNotMatch(printed, /bug in Troupe/);
      return true;
    },
  );
  assert.equal(loadTeam('math').name, 'math');
  assert.deepEqual(Object.keys(teamLoadErrors()), ['broken']);
});

it('the CLI refuses a broken team with its error and still accepts the others, with their run defaults', () => {
  assert.throws(
    () => validateRunConfig({ team: 'broken' }),
    (e: unknown) => {
      assert.doesNotMatch(formatError(e), /bug in Troupe/);
      assert.match(formatError(e), /rewards\.solvr/);
      return true;
    },
  );
  assert.equal(validateRunConfig({ team: 'research' }).team, 'research');
  // a team's run defaults fill what the config leaves out; a field it sets wins
  const lookup = validateRunConfig({ team: 'ai-sdk-lookup', groupsPerStep: 8 });
  assert.deepEqual([lookup.steps, lookup.groupsPerStep, lookup.groupSize], [60, 8, 8]);
  assert.deepEqual([validateRunConfig({ team: 'lookout' }).steps, validateRunConfig({ team: 'research' }).steps], [48, 40]);
  assert.throws(
    () => loadTeam('nope'),
    (e: unknown) =>
      e instanceof TeamLoadError &&
      /unknown team "nope" \(known: math, research, recall, chain, navigator, lookout, chat-digits, ai-sdk-lookup, agents-handoff, python-lookup, lab, broken\)/.test(
        e.message,
      ),
  );
});

it('importing the registry loads no team module (so commands that need no team never see a broken one)', () => {
  const out = execFileSync(
    process.execPath,
    [
      '--import',
      'tsx',
      '-e',
      `require('./agents/team-registry'); console.log(Object.keys(require.cache).filter((k) => /agents\\/teams\\/(math|research)\\.ts$/.test(k)).length)`,
    ],
    { cwd: root, encoding: 'utf8' },
  );
  assert.equal(out.trim(), '0');
});

it("a bad team option is named once, as the run's to fix, not as a broken team definition", () => {
  assert.throws(
    () => validateRunConfig({ team: 'math', teamOptions: { policy: 'gpt' } }),
    (e: unknown) => {
      assert.equal(
        formatError(e),
        'troupe: team math: teamOptions.policy: must be "tiny-lm" or "transformer", got "gpt"\n  → fix the team options (--team-options, or teamOptions in the run config)',
      );
      return true;
    },
  );
});

it('a team is built once per factory and options; a replaced factory builds anew', () => {
  let builds = 0;
  const make = (options: Record<string, unknown>) => {
    builds++;
    return { ...loadTeam('math'), name: 'counted', tag: options.tag } as unknown as ReturnType<typeof loadTeam>;
  };
  teams.counted = make;
  try {
    const a = loadTeam('counted', { tag: 1 });
    assert.equal(loadTeam('counted', { tag: 1 }), a);
    assert.equal(builds, 1);
    assert.notEqual(loadTeam('counted', { tag: 2 }), a);
    assert.equal(builds, 2);
    // the project re-entered: a new factory under the same name is not served the old team
    teams.counted = (o) => make(o);
    assert.notEqual(loadTeam('counted', { tag: 1 }), a);
    assert.equal(builds, 3);
    // a failed build is not kept: the next call tries again
    let fail = true;
    teams.counted = (o) => {
      if (fail) throw new Error('not yet');
      return make(o);
    };
    assert.throws(() => loadTeam('counted'), /not yet/);
    fail = false;
    assert.equal(loadTeam('counted').name, 'counted');
  } finally {
    delete teams.counted;
  }
});
