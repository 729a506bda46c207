// Troupe as a user gets it: `npm pack`, the tarball installed into a fresh folder outside the
// repository (`npm install` running no install script, no .npmrc; the embedded PostgreSQL), `troupe init`, the scaffolded team trained, a
// second team and a custom estimator added (the workers restart on the changed team code), one
// team broken while the other still trains; a run started from the Temporal Web UI served by the
// project's workers; an ESM project on the same package (and doctor refusing the other project's
// workers). Prints the time of install + init + first train.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, test } from 'node:test';
import { repoRoot } from '../../../infra/paths';
import { readRecord } from '../../../stack/processes';
import { browserSkipReason, launchBrowser } from '../dashboard/browser';
import { freePort } from '../../../testing/ports';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-package-'));
const project = path.join(work, 'my-teams');
const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
  fs.rmSync(work, { recursive: true, force: true });
});

function run(command: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    child.on('close', (code) => resolve({ code: code ?? 1, out }));
  });
}

const ESTIMATOR = `import { defineEstimator, scopeSamples, toResult, mean } from 'troupe';

// A = s - mean of its set: GRPO without the std, written as a user would.
export default defineEstimator({
  name: 'mean-baseline',
  summary: 's - mean per set',
  supportsNormalizeStd: false,
  perComponent: false,
  estimate(samples, options) {
    const scoped = scopeSamples(samples, options);
    const adv = new Float64Array(samples.length);
    for (const set of scoped.sets) {
      const m = mean(set.map((i) => scoped.scores[i]!));
      for (const i of set) adv[i] = scoped.scores[i]! - m;
    }
    return toResult('mean-baseline', samples, scoped, adv, options);
  },
});
`;

// A program driving runs through the typed client, as a user's script would (run with tsx).
const DRIVE = `import { connectTroupe } from 'troupe/client';

async function main() {
  const troupe = await connectTroupe();
  try {
    const refused = await troupe.startRun({ team: 'count', steps: -1 }).then(() => 'started', (e: Error) => e.message);
    // Long enough (a few seconds) for the 500 ms status polls to see it move, on a warm stack too.
    const { runId } = await troupe.startRun({ team: 'count', steps: 30, groupsPerStep: 2, groupSize: 4 });
    const seen: string[] = [];
    const summary = await troupe.watchRun(runId, (s) => seen.push(s.step + '/' + s.steps + ' ' + s.status));
    const listed = (await troupe.listRuns()).find((r) => r.runId === runId);
    console.log(JSON.stringify({ refused, runId, status: summary.status, seen, listed: listed?.status, open: await troupe.status(runId) }));
  } finally {
    await troupe.close();
  }
}
main().catch((e) => {
  console.error(e);
  process.exit(1);
});
`;

const SECOND_TEAM = `import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from 'troupe';
import { target } from './lib/target';

const tokenizer = charTokenizer('0123456789');
export default defineTeam({
  name: 'echo',
  tokenizer,
  models: { policy: tinyLM({ tokenizer, contextWindow: 4, embedDim: 8, hiddenDim: 16 }) },
  agents: { echoer: agent({ model: 'policy', maxTokens: 1 }) },
  tasks: generatedTasks<{ d: number }>({ seed: 2, count: 10, evalFraction: 0.2, make: (_r, i) => ({ id: String(i), data: { d: i } }) }),
  async episode({ task, agents }) {
    return { answer: (await agents.echoer.act(String(task.d))).reply };
  },
  rewards: { echoer: ({ task, outcome }) => ({ correct: outcome?.answer === target(task.d) ? 1 : 0 }) },
  success: ({ task, outcome }) => outcome?.answer === target(task.d),
});
`;

// Half its episodes (seeded: the same ones every time) hang in a synchronous loop after their first turn.
const RUNAWAY_TEAM = `import { agent, charTokenizer, defineTeam, generatedTasks, tinyLM } from 'troupe';

const tokenizer = charTokenizer('0123456789');
export default defineTeam({
  name: 'spin',
  tokenizer,
  models: { policy: tinyLM({ tokenizer, contextWindow: 4, embedDim: 8, hiddenDim: 16 }) },
  agents: { spinner: agent({ model: 'policy', maxTokens: 1 }) },
  tasks: generatedTasks<{ d: number }>({ seed: 3, count: 10, evalFraction: 0.2, make: (_r, i) => ({ id: String(i), data: { d: i } }) }),
  limits: { cpuMs: 2000 },
  async episode({ task, agents }) {
    const reply = (await agents.spinner.act(String(task.d))).reply;
    if (Math.random() < 0.5) for (;;);
    return { answer: reply };
  },
  rewards: { spinner: ({ task, outcome }) => ({ correct: outcome?.answer === String(task.d) ? 1 : 0 }) },
  success: ({ task, outcome }) => outcome?.answer === String(task.d),
});
`;

test(
  'npm pack, npm install in a fresh folder, troupe init, train; a second team and estimator; a broken team; an ESM project',
  { timeout: 15 * 60_000 },
  async () => {
    // 1. Pack (prepack generates the protocol types, builds the dashboard page and the declaration files).
    const pack = spawnSync('npm', ['pack', '--pack-destination', work, '--json'], { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    assert.equal(pack.status, 0, pack.stderr);
    const tarball = path.join(work, (JSON.parse(pack.stdout) as { filename: string }[])[0]!.filename);

    // 2. A fresh project folder outside the repository, an `npm install` of the tarball that runs no
    // install script (as npm 11 does for packages nobody approved): Troupe needs none, and its
    // stack's embedded PostgreSQL starts without its package's postinstall (stack/postgres.ts linkLibraries).
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'my-teams', version: '1.0.0', private: true }));
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const k of Object.keys(env)) if (/^(TROUPE_|TEMPORAL_|DATABASE_URL|ONNXRUNTIME_NODE_INSTALL|npm_)/.test(k)) delete env[k];
    const t0 = Date.now();
    const install = await run('npm', ['install', tarball, '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: project, env });
    assert.equal(install.code, 0, install.out);
    const installS = (Date.now() - t0) / 1000;
    assert.ok(fs.existsSync(path.join(project, 'node_modules', 'troupe', 'dist', 'types', 'index.d.ts')), 'declaration files ship');

    Object.assign(env, {
      TROUPE_POSTGRES_PORT: String(await freePort()),
      TROUPE_TEMPORAL_PORT: String(await freePort()),
      TROUPE_TEMPORAL_UI_PORT: String(await freePort()),
      TROUPE_DASHBOARD_PORT: String(await freePort()),
    });
    const troupe = (...args: string[]) => run(path.join(project, 'node_modules', '.bin', 'troupe'), args, { cwd: project, env });
    cleanups.push(() => troupe('down'));

    // Outside a project: a clear error with the init hint.
    const none = await troupe('list');
    assert.equal(none.code, 1);
    assert.match(none.out, /no Troupe project here: no troupe\.config\.ts in .*my-teams/);
    assert.match(none.out, /npx troupe init/);

    // 3. init, then train the scaffolded team for 2 steps; the stack's state lands in the project's .troupe/.
    const t1 = Date.now();
    const init = await troupe('init');
    assert.equal(init.code, 0, init.out);
    for (const f of ['troupe.config.ts', 'teams/count.ts', 'tsconfig.json', '.gitignore']) assert.ok(fs.existsSync(path.join(project, f)), f);
    // TypeScript, the version Troupe pins, is a devDependency of the project; not installed yet, so init says to.
    const pinnedTs = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies
      .typescript;
    assert.equal(
      (JSON.parse(fs.readFileSync(path.join(project, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies.typescript,
      pinnedTs,
    );
    assert.match(init.out, /next: npm install +\(installs TypeScript/);
    const first = await troupe('train', 'count', '--steps', '2', '--groups', '2', '--group-size', '4');
    assert.equal(first.code, 0, first.out);
    // Trained without `npm install`: the first train says why the team was not checked, and what to run.
    assert.match(first.out, /team "count" was not type-checked: TypeScript is in package\.json but not installed \(run npm install\)/);
    assert.match(first.out, /run count-\S+ \(count\) completed after 2 steps/);
    const firstS = (Date.now() - t1) / 1000;
    assert.ok(readRecord(path.join(project, '.troupe'), 'control-worker'), "the stack's state is in the project's .troupe/");
    console.log(`# npm install ${installS.toFixed(1)} s; troupe init + first train (2 steps, stack start included) ${firstS.toFixed(1)} s`);

    // doctor names the project and checks the running workers serve it.
    const doctor = await troupe('doctor');
    assert.match(doctor.out, /info +project +\S*my-teams\/troupe\.config\.ts: teams count/);
    assert.match(doctor.out, /ok +worker project +the workers serve project \S*my-teams/);

    // The scaffolded project type-checks against the shipped declaration files (CommonJS project).
    const tsc = await run(process.execPath, [path.join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', project], { cwd: project, env });
    assert.equal(tsc.code, 0, tsc.out);

    // The typed client: a bad config refused naming the field; a run started, watched with progress events, listed.
    fs.writeFileSync(path.join(project, 'drive.ts'), DRIVE);
    const drive = await run(process.execPath, ['--import', 'tsx', 'drive.ts'], { cwd: project, env });
    assert.equal(drive.code, 0, drive.out);
    const driven = JSON.parse(drive.out.trim().split('\n').at(-1)!) as { refused: string; status: string; seen: string[]; listed: string; open: unknown };
    assert.match(driven.refused, /steps: /);
    assert.equal(driven.status, 'completed');
    assert.ok(driven.seen.length >= 2, driven.seen.join(', '));
    assert.equal(driven.listed, 'completed');
    assert.equal(driven.open, undefined);

    // A run started from the Temporal Web UI's Start Workflow form (real UI, headless Chromium) runs
    // on the project's workers: `count` is a team of this project only.
    if (!browserSkipReason()) {
      const browser = await launchBrowser();
      try {
        const page = await browser.context.newPage();
        await page.goto(`http://127.0.0.1:${env.TROUPE_TEMPORAL_UI_PORT}/namespaces/default/workflows/start-workflow`, { waitUntil: 'networkidle' });
        await page.fill('#workflowId', 'count-from-ui');
        await page.fill('#taskQueue', 'troupe');
        await page.fill('#workflowType', 'trainingRun');
        await page.click('.cm-content'); // the input's JSON editor
        await page.keyboard.insertText('{"team": "count", "steps": 2, "groupsPerStep": 2, "groupSize": 4}');
        // The form's button, pressed from the keyboard (a mouse click can land on the alert the
        // form inserts above it once it has looked the task queue up).
        const started = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().includes('/workflows/count-from-ui'), { timeout: 30_000 });
        await page.getByTestId('start-workflow-button').focus();
        await page.keyboard.press('Enter');
        assert.equal((await started).status(), 200, 'the Web UI started the workflow');
      } finally {
        await browser.close();
      }
      const fromUi = await troupe('status', 'count-from-ui', '--watch');
      assert.equal(fromUi.code, 0, fromUi.out);
      assert.match(fromUi.out, /completed/);
    }

    // 4. A second team (with a local import) and a custom estimator: the workers restart on the changed team code.
    fs.mkdirSync(path.join(project, 'teams', 'lib'), { recursive: true });
    fs.writeFileSync(path.join(project, 'teams', 'lib', 'target.ts'), 'export const target = (d: number) => String(d);\n');
    fs.writeFileSync(path.join(project, 'teams', 'echo.ts'), SECOND_TEAM);
    fs.mkdirSync(path.join(project, 'estimators'));
    fs.writeFileSync(path.join(project, 'estimators', 'mean-baseline.ts'), ESTIMATOR);
    const config = path.join(project, 'troupe.config.ts');
    fs.writeFileSync(
      config,
      fs
        .readFileSync(config, 'utf8')
        .replace("count: './teams/count.ts',", "count: './teams/count.ts',\n    echo: './teams/echo.ts',")
        .replace('estimators: [],', "estimators: ['./estimators/mean-baseline.ts'],"),
    );
    const bad = await troupe('train', 'echo', '--steps', '1', '--estimator', 'no-such');
    assert.equal(bad.code, 1);
    assert.match(bad.out, /unknown estimator "no-such"; known: grpo, .*mean-baseline/);
    const second = await troupe('train', 'echo', '--steps', '2', '--groups', '2', '--group-size', '4', '--estimator', 'mean-baseline');
    assert.equal(second.code, 0, second.out);
    assert.match(second.out, /team code changed since the control-worker started .*restarting it/);
    assert.match(second.out, /run echo-\S+ \(echo\) completed after 2 steps/);

    // A local import counts as team code: editing it restarts the workers too.
    fs.writeFileSync(path.join(project, 'teams', 'lib', 'target.ts'), 'export const target = (d: number) => String((d + 2) % 10);\n');

    // 5. Break one team: the other still trains, the broken one is refused naming its file.
    fs.writeFileSync(path.join(project, 'teams', 'count.ts'), 'export default { name: "count" ;\n');
    const still = await troupe('train', 'echo', '--steps', '2', '--groups', '2', '--group-size', '4');
    assert.equal(still.code, 0, still.out);
    assert.match(still.out, /restarting it/);
    assert.match(still.out, /run echo-\S+ \(echo\) completed after 2 steps/);
    // 6. Episodes that hang in a synchronous loop fail, naming the limit; the run goes on, and the next run on the stack is unaffected.
    fs.writeFileSync(path.join(project, 'teams', 'spin.ts'), RUNAWAY_TEAM);
    fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace("echo: './teams/echo.ts',", "echo: './teams/echo.ts',\n    spin: './teams/spin.ts',"));
    const spin = await troupe('train', 'spin', '--steps', '2', '--groups', '2', '--group-size', '4', '--seed', '1');
    assert.equal(spin.code, 0, spin.out);
    assert.match(spin.out, /run spin-\S+ \(spin\) completed after 2 steps/);
    assert.match(spin.out, /without awaiting a turn or tool call, after its turn 1 \(model policy\) \(a synchronous loop\? team limits\.cpuMs: 2000 ms\)/);
    const after = await troupe('train', 'echo', '--steps', '1', '--groups', '2', '--group-size', '4');
    assert.equal(after.code, 0, after.out);
    assert.match(after.out, /run echo-\S+ \(echo\) completed after 1 steps/);

    const broken = await troupe('train', 'count', '--steps', '1');
    assert.equal(broken.code, 1);
    assert.match(broken.out, /team "count" failed to load/);
    assert.match(broken.out, /teams\/count\.ts/);

    // A team with a type error (tsx and the bundler run it unchecked) is refused before anything
    // starts, naming file, line and column: with TypeScript installed in the project.
    const typescript = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies
      .typescript;
    const withTs = await run('npm', ['install', '-D', `typescript@${typescript}`, '--prefer-offline', '--no-audit', '--no-fund'], { cwd: project, env });
    assert.equal(withTs.code, 0, withTs.out);
    fs.writeFileSync(path.join(project, 'teams', 'typed.ts'), `${SECOND_TEAM.replace("name: 'echo'", "name: 'typed'")}\nexport const wrong: number = 'one';\n`);
    fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace("echo: './teams/echo.ts',", "echo: './teams/echo.ts',\n    typed: './teams/typed.ts',"));
    const typed = await troupe('train', 'typed', '--steps', '1');
    assert.equal(typed.code, 1, typed.out);
    assert.match(typed.out, /team "typed" has 1 type error; nothing was started: teams\/typed\.ts:\d+:14: Type 'string' is not assignable to type 'number'/);
    assert.doesNotMatch(typed.out, /started run/);

    // A config naming a missing module or a non-team export: that team's error, naming the field.
    fs.writeFileSync(config, fs.readFileSync(config, 'utf8').replace("echo: './teams/echo.ts',", "echo: './teams/echo.ts',\n    gone: './teams/gone.ts',"));
    const gone = await troupe('train', 'gone', '--steps', '1');
    assert.equal(gone.code, 1);
    assert.match(gone.out, /teams\.gone: module "\.\/teams\/gone\.ts" not found/);

    // 7. An ESM project ("type": "module") on the same installed package: scaffolded, type-checked
    // against the declaration files, trained (its config and teams loaded as ES modules).
    const esm = path.join(work, 'esm-teams');
    fs.mkdirSync(esm);
    fs.writeFileSync(path.join(esm, 'package.json'), JSON.stringify({ name: 'esm-teams', version: '1.0.0', private: true, type: 'module' }));
    fs.symlinkSync(path.join(project, 'node_modules'), path.join(esm, 'node_modules'), 'dir');
    const troupeEsm = (...args: string[]) => run(path.join(esm, 'node_modules', '.bin', 'troupe'), args, { cwd: esm, env });
    cleanups.push(() => troupeEsm('down'));
    assert.equal((await troupeEsm('init')).code, 0);
    // Pointed at the first project's stack (same ports), doctor refuses its workers: they serve another project.
    const foreign = await troupeEsm('doctor');
    assert.equal(foreign.code, 1, foreign.out);
    assert.match(foreign.out, /FAIL +worker project +worker ".*" serves project \S*my-teams, this is project \S*esm-teams — stop it/);
    assert.equal((await troupe('down')).code, 0);
    const esmTsc = await run(process.execPath, [path.join(esm, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', esm], { cwd: esm, env });
    assert.equal(esmTsc.code, 0, esmTsc.out);
    const esmTrain = await troupeEsm('train', 'count', '--steps', '2', '--groups', '2', '--group-size', '4');
    assert.equal(esmTrain.code, 0, esmTrain.out);
    assert.match(esmTrain.out, /run count-\S+ \(count\) completed after 2 steps/);
    assert.ok(readRecord(path.join(esm, '.troupe'), 'control-worker'), "the ESM project's stack state is in its own .troupe/");
  },
);
