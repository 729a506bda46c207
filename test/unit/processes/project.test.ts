/**
 * A project's config and teams as every process loads them (processes/project.ts): found by
 * walking up, checked by field, each bad team its own error naming its file and field while
 * the others load; estimators validated like built-ins; the team-code hash over local imports.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { loadTeam, teams } from '../../../agents/team-registry';
import { repoRoot } from '../../../infra/paths';
import { enterProject, findProjectConfig, projectCodeFiles, readProject } from '../../../processes/project';
import { projectOf, teamCodeHash, teamCodeOf, workerIdentity } from '../../../processes/team-code';
import { defineEstimator, getEstimator, isEstimatorName } from '../../../rl/advantages/registry';
import { parseProjectConfig } from '../../../schema/project';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-project-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const api = JSON.stringify(path.join(repoRoot, 'index'));
const write = (rel: string, text: string) => {
  fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
  fs.writeFileSync(path.join(dir, rel), text);
};
const team = (name: string, extra = '') => `import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from ${api};
${extra}
const tokenizer = charTokenizer('01');
export default defineTeam({
  name: '${name}', tokenizer, models: { policy: tinyLM({ tokenizer }) }, agents: { a: agent({ model: 'policy', maxTokens: 1 }) },
  tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: String(i), data: i }) }),
  async episode({ agents }) { return (await agents.a.act('0')).reply; },
  rewards: { a: () => ({ r: 0 }) }, success: () => false,
});
`;

test('the config is found by walking up and checked field by field', () => {
  write('troupe.config.ts', 'export default {}');
  fs.mkdirSync(path.join(dir, 'deep', 'er'), { recursive: true });
  assert.equal(findProjectConfig(path.join(dir, 'deep', 'er')), path.join(dir, 'troupe.config.ts'));
  assert.throws(
    () => parseProjectConfig({ teams: { Bad: './x.ts', ok: 3 }, estimators: 'x', stack: { A: {} }, extra: 1 }, 'troupe.config.ts'),
    (e: Error) =>
      /^invalid project config troupe\.config\.ts: /.test(e.message) &&
      /extra: unknown field/.test(e.message) &&
      /teams\.Bad: a team name is lower-case/.test(e.message) &&
      /teams\.ok: must be a module path, got number/.test(e.message) &&
      /estimators: must be an array/.test(e.message) &&
      /stack\.A: must be a string, number or boolean/.test(e.message),
  );
});

test('each bad team is its own error naming its module and field; the good one loads; estimators are validated', () => {
  write('teams/good.ts', team('good', "import { two } from './lib/two';\nvoid two;"));
  write('teams/lib/two.ts', 'export const two = 2;\n');
  write('teams/misnamed.ts', team('other'));
  write('teams/notateam.ts', 'export default { hello: 1 };\n');
  write('teams/syntax.ts', 'export default { name: "x" ;\n');
  write(
    'estimators/mine.ts',
    `import { defineEstimator, getEstimator } from ${JSON.stringify(path.join(repoRoot, 'rl', 'advantages', 'registry'))};\ndefineEstimator({ ...getEstimator('rloo'), name: 'mine' });\n`,
  );
  write(
    'troupe.config.ts',
    `export default { teams: { good: './teams/good', misnamed: './teams/misnamed.ts', notateam: './teams/notateam.ts', syntax: './teams/syntax.ts', gone: './teams/gone.ts' },
  estimators: ['./estimators/mine.ts'], stack: { TROUPE_DASHBOARD_PORT: 9999 } };\n`,
  );
  write('sub/troupe.config.ts', "export default { teams: {}, estimators: ['./none.ts'], stack: { NOPE: 1 } };\n");
  assert.throws(
    () => readProject(path.join(dir, 'sub', 'troupe.config.ts')),
    (e: Error) => /stack\.NOPE: unknown setting/.test(e.message) && /estimators\[0\]: module "\.\/none\.ts" not found/.test(e.message),
  );
  const env: NodeJS.ProcessEnv = {};
  const project = enterProject(path.join(dir, 'troupe.config.ts'), env);
  assert.equal(env.TROUPE_STATE_DIR, path.join(dir, '.troupe'));
  assert.equal(env.TROUPE_DASHBOARD_PORT, '9999');
  assert.deepEqual(Object.keys(teams), ['good', 'misnamed', 'notateam', 'syntax', 'gone']);
  assert.equal(loadTeam('good').name, 'good');
  assert.throws(() => loadTeam('misnamed'), /teams\.misnamed: teams\/misnamed\.ts defines team "other"/);
  assert.throws(() => loadTeam('notateam'), /teams\.notateam\.export: export "default" of teams\/notateam\.ts is not a team/);
  assert.throws(
    () => loadTeam('syntax'),
    (e: Error & { hint?: string }) => /team "syntax" failed to load/.test(e.message) && /teams\/syntax\.ts/.test(e.hint ?? ''),
  );
  assert.throws(() => loadTeam('gone'), /teams\.gone: module "\.\/teams\/gone\.ts" not found/);
  assert.throws(() => loadTeam('nope'), /unknown team "nope" \(known: good, misnamed, notateam, syntax, gone\)/);
  assert.ok(isEstimatorName('mine') && getEstimator('mine').name === 'mine');
  // The team code: the config, the team and estimator modules, and the local import of good.ts.
  const files = projectCodeFiles(project).map((f) => path.relative(dir, f));
  assert.ok(files.includes('teams/lib/two.ts') && files.includes('troupe.config.ts') && files.includes('estimators/mine.ts'), files.join(', '));
  const before = teamCodeHash();
  write('teams/lib/two.ts', 'export const two = 3;\n');
  assert.notEqual(teamCodeHash(), before);
});

test('defineEstimator refuses a built-in name and names every bad field', () => {
  assert.throws(() => defineEstimator({ ...getEstimator('grpo') }), /estimator\.name: "grpo" is a built-in estimator/);
  assert.throws(
    () => defineEstimator({ name: 'Bad Name', summary: 1, supportsNormalizeStd: 'no', perComponent: false, discounted: 1, estimate: null } as never),
    (e: Error) =>
      /estimator\.name: must be lower-case/.test(e.message) &&
      /estimator\.summary/.test(e.message) &&
      /estimator\.supportsNormalizeStd/.test(e.message) &&
      /estimator\.discounted: must be a boolean, got 1/.test(e.message) &&
      /estimator\.estimate/.test(e.message),
  );
});

test('teams as a folder: each module directly in it is a team named by its file; two of one name are refused', () => {
  write('folder/troupe.config.ts', "export default { teams: './teams' };\n");
  write('folder/teams/alpha.ts', team('alpha'));
  write('folder/teams/lib/helper.ts', 'export const x = 1;\n');
  const project = readProject(path.join(dir, 'folder', 'troupe.config.ts'));
  assert.deepEqual(project.config.teams, { alpha: { module: './teams/alpha.ts' } });
  write('folder/teams/alpha.js', 'module.exports = {};\n');
  assert.throws(() => readProject(path.join(dir, 'folder', 'troupe.config.ts')), /teams\.alpha: defined twice: \.\/teams\/alpha\.js and \.\/teams\/alpha\.ts/);
  write('folder/troupe.config.ts', "export default { teams: './nothing' };\n");
  assert.throws(() => readProject(path.join(dir, 'folder', 'troupe.config.ts')), /teams: folder "\.\/nothing" not found/);
});

test("a worker's identity names the project it serves, and still its team code", () => {
  const id = workerIdentity('abc123abc123', '/srv/my teams');
  assert.ok(id.startsWith(`${process.pid}@${os.hostname()} `));
  assert.equal(projectOf(id), '/srv/my teams');
  assert.equal(teamCodeOf(id), 'abc123abc123');
  assert.equal(projectOf(workerIdentity('abc123abc123', null)), undefined);
});
