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
const train = (...args: string[]) => spawnSync(process.execPath, [bin, 'train', ...args], { encoding: 'utf8', env: { ...process.env, TROUPE_STATE_DIR: state } });

it('rejects bad flags naming the fields, and starts nothing', () => {
  const r = train('math', '--steps', '0', '--rollout', 'warp', '--estimator', 'ppo');
  assert.equal(r.status, 1);
  assert.match(r.stderr, /troupe: invalid run config: /);
  assert.match(r.stderr, /steps: must be >= 1/);
  assert.match(r.stderr, /rollout: /);
  assert.match(r.stderr, /optimizer\.all\.estimator\.name: unknown estimator "ppo"/);
  assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/, 'no stack trace');
  assert.deepEqual(fs.readdirSync(state), []);
});

it('rejects an unknown team and a config file with unknown fields', () => {
  const unknown = train('chess');
  assert.equal(unknown.status, 1);
  assert.match(unknown.stderr, /team: unknown team "chess" \(known: math, research\)/);
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
