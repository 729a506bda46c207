/**
 * `troupe train` validates the run config before it starts anything: a bad
 * flag or config file is one line naming each bad field, and exit code 1.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { it } from 'node:test';

const bin = path.join(__dirname, '..', '..', '..', 'cli', 'bin.js');
// A state dir that must stay empty: nothing may be started for an invalid config.
const state = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-cli-'));
const train = (...args: string[]) =>
  spawnSync(process.execPath, [bin, 'train', ...args], { encoding: 'utf8', env: { ...process.env, TROUPE_STATE_DIR: state } });

it('rejects bad flags naming the fields, and starts nothing', () => {
  const r = train('math', '--steps', '-1', '--rollout', 'warp', '--estimator', 'ppo');
  assert.equal(r.status, 1);
  assert.match(r.stderr, /troupe: invalid run config: /);
  assert.match(r.stderr, /steps: must be >= 0/);
  assert.match(r.stderr, /rollout: /);
  assert.match(r.stderr, /optimizer\.all\.estimator\.name: unknown estimator "ppo"/);
  assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/, 'no stack trace');
  assert.deepEqual(fs.readdirSync(state), []);
});

it('rejects an unknown team and a config file with unknown fields', () => {
  const unknown = train('chess');
  assert.equal(unknown.status, 1);
  assert.match(
    unknown.stderr,
    /team: unknown team "chess" \(known: math, research, recall, chain, navigator, lookout, chat-digits, ai-sdk-lookup, agents-handoff, python-lookup, lab\)/,
  );
  const file = path.join(state, '..', `troupe-bad-config-${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify({ groupSize: 'eight', optimizer: { agents: { judge: { lr: 0.1 } } } }));
  try {
    const r = train('math', '--config', file);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /groupSize: /);
  } finally {
    fs.rmSync(file);
  }
  const agents = train('math', '--team-options', '{"models":"shared"}', '--config', '/nonexistent/run.json');
  assert.match(agents.stderr, /--config: cannot read \/nonexistent\/run\.json/);
  assert.deepEqual(fs.readdirSync(state), []);
});

it('a negative number after an option is its value: the same field message as --opt=-3', () => {
  const spaced = train('math', '--steps', '-3', '--seed', '-1');
  const joined = train('math', '--steps=-3', '--seed=-1');
  assert.equal(spaced.status, 1);
  assert.match(spaced.stderr, /^troupe: invalid run config: steps: must be >= 0; seed: must be >= 0\n/);
  assert.equal(spaced.stderr, joined.stderr);
  // An option given no value at all is still refused, and node's whole message fits on the one line printed.
  const missing = train('math', '--run-id', '--json');
  assert.match(
    missing.stderr,
    /^troupe: train: Option '--run-id' argument is ambiguous\. Did you forget to specify the option argument for '--run-id'\? To specify an option argument starting with a dash use '--run-id=-XYZ'\.\n/,
  );
  assert.deepEqual(fs.readdirSync(state), []);
});

it('a number option that is not a number names the option and suggests a sensible value', () => {
  const lr = train('math', '--lr', 'NaN');
  assert.equal(lr.status, 1);
  assert.match(lr.stderr, /^troupe: --lr: expected a number, got "NaN"\n {2}→ e\.g\. --lr 0\.001\n/);
  assert.match(train('math', '--steps', '').stderr, /^troupe: --steps: expected a number, got ""\n {2}→ e\.g\. --steps 40\n/);
  // A number the engine cannot take is refused before anything starts, naming the field.
  assert.match(train('math', '--lr', '1e300').stderr, /^troupe: invalid run config: optimizer\.all\.lr: must be at most 3\.4e38 in magnitude/);
  assert.deepEqual(fs.readdirSync(state), []);
});

it('--model DIR moves the team onto the directory: a model that cannot load it is refused by field, starting nothing', () => {
  const r = train('math', '--model', path.join('test', 'fixtures', 'hf', 'qwen2-tiny'));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /models\.policy\.checkpoint: only transformer models load a checkpoint; this is a tiny-lm model/);
  assert.deepEqual(fs.readdirSync(state), []);
});

it("--config names the team: the file's team is trained; both naming different teams is refused, naming both", () => {
  const file = (name: string, config: Record<string, unknown>) => {
    const f = path.join(state, '..', `troupe-team-config-${process.pid}-${name}.json`);
    fs.writeFileSync(f, JSON.stringify(config));
    return f;
  };
  const chess = file('chess', { team: 'chess' });
  const math = file('math', { team: 'math', steps: -1 });
  const none = file('none', { steps: 2 });
  try {
    // The file's team is the run's: an unknown one is named by the run config's check.
    assert.match(train('--config', chess).stderr, /^troupe: team: unknown team "chess" \(known: math, /);
    // ... and a known one gets as far as the config's other fields.
    const fromFile = train('--config', math);
    assert.equal(fromFile.status, 1);
    assert.match(fromFile.stderr, /^troupe: invalid run config: steps: must be >= 0\n/);
    // The same team in both places is fine.
    assert.equal(train('math', '--config', math).stderr, fromFile.stderr);
    const both = train('recall', '--config', math);
    assert.equal(both.status, 1);
    assert.match(
      both.stderr,
      new RegExp(`^troupe: train: two teams named: "recall" on the command line and "math" in ${math.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\n`),
    );
    // Neither names one.
    assert.match(train('--config', none).stderr, /^troupe: train: name one team\n.*--config file with "team": "math"/);
    assert.match(train().stderr, /^troupe: train: name one team\n/);
    assert.match(train('--config', file('bad', { team: 3 })).stderr, /^troupe: --config: \S+: team must be a team's name, got 3\n/);
    assert.match(train('math', 'recall').stderr, /^troupe: train: name one team, not 2 \(math, recall\)\n/);
  } finally {
    for (const f of fs.readdirSync(path.join(state, '..')).filter((n) => n.startsWith(`troupe-team-config-${process.pid}-`)))
      fs.rmSync(path.join(state, '..', f));
  }
  assert.deepEqual(fs.readdirSync(state), []);
});
