import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { commandHelp, main } from '../../../cli/main';
import { commands } from '../../../cli/commands';
import { TroupeError } from '../../../infra/errors';
import { repoRoot } from '../../../infra/paths';

const bin = path.join(repoRoot, 'cli', 'bin.js');
const troupe = (...args: string[]) => spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8', env: { ...process.env, TROUPE_DEBUG: '' } });

test('every registered command loads, has a summary and usage, and --help works', async () => {
  for (const [name, load] of Object.entries(commands)) {
    const cmd = await load();
    assert.equal(cmd.name, name);
    assert.ok(cmd.summary.length > 10);
    assert.match(cmd.usage, new RegExp(`^troupe ${name}\\b`));
    const help = commandHelp(cmd);
    assert.match(help, /^Usage: troupe /);
    assert.match(help, /-h, --help/);
  }
  for (const name of ['up', 'down', 'doctor', 'ping']) assert.ok(name in commands, `${name} is registered`);
});

test('unknown commands and options are TroupeErrors with a hint', async () => {
  await assert.rejects(main(['nope']), (e: unknown) => e instanceof TroupeError && /unknown command "nope"/.test(e.message) && !!e.hint);
  await assert.rejects(main(['ping', '--frobnicate']), (e: unknown) => e instanceof TroupeError && /ping: Unknown option '--frobnicate'/.test(e.message));
  await assert.rejects(main(['down', 'extra']), (e: unknown) => e instanceof TroupeError && /down: /.test(e.message));
});

test('bin.js: --help exits 0; an error is one line plus what to do, without a stack', () => {
  const help = troupe('--help');
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /Commands:\n {2}up /);
  const upHelp = troupe('up', '--help');
  assert.equal(upHelp.status, 0);
  assert.match(upHelp.stdout, /--no-pool/);

  const bad = troupe('nope');
  assert.equal(bad.status, 1);
  assert.deepEqual(bad.stderr.trim().split('\n').length, 2, bad.stderr);
  assert.match(bad.stderr, /^troupe: unknown command "nope"\n {2}→ /);
  assert.doesNotMatch(bad.stderr, /\n\s+at /);
});

test('bin.js: a configuration error names the variable', () => {
  const r = spawnSync(process.execPath, [bin, 'down'], { encoding: 'utf8', env: { ...process.env, DATABASE_URL: 'http://x' } });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /^troupe: DATABASE_URL: must start with postgres:\/\//);
});

test("bin.js: train --help names the teams of the project it runs in, else the checkout's examples project", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-help-'));
  try {
    fs.writeFileSync(path.join(dir, 'troupe.config.ts'), "export default { teams: { alpha: './alpha.ts', beta: './beta.ts' } };\n");
    const inside = spawnSync(process.execPath, [bin, 'train', '--help'], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, TROUPE_DEBUG: '', TROUPE_PROJECT: '' },
    });
    assert.equal(inside.status, 0, inside.stderr);
    assert.match(inside.stdout, /Teams: alpha, beta \(the project's, from .*troupe\.config\.ts\)/);
    const outside = troupe('train', '--help');
    assert.equal(outside.status, 0, outside.stderr);
    assert.match(
      outside.stdout,
      /Teams: math, research, recall, chain, navigator, lookout, chat-digits, ai-sdk-lookup, agents-handoff, python-lookup, lab \(the project's, from .*examples\/troupe\.config\.ts\)/,
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
