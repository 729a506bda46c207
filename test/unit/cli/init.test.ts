/**
 * `troupe init` scaffolds a project whose teams `train` can type-check: TypeScript, the version
 * Troupe pins, is in its package.json's devDependencies (a new one, or the one already there).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, it } from 'node:test';
import { repoRoot } from '../../../infra/paths';
import { noTypeScriptReason } from '../../../processes/type-check';

const bin = path.join(repoRoot, 'cli', 'bin.js');
const pinned = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies
  .typescript!;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-init-'));
after(() => fs.rmSync(work, { recursive: true, force: true }));

function init(dir: string) {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('TROUPE_')) delete env[k];
  return spawnSync(process.execPath, [bin, 'init', dir], { cwd: work, encoding: 'utf8', env });
}
const readJson = (file: string) => JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;

it('a new project: package.json written with TypeScript as a devDependency', () => {
  const dir = path.join(work, 'fresh');
  const r = init(dir);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /wrote troupe\.config\.ts, teams\/count\.ts, tsconfig\.json, package\.json, \.gitignore/);
  assert.deepEqual(readJson(path.join(dir, 'package.json')).devDependencies, { typescript: pinned });
});

it('an existing package.json (Troupe installed into it) gains the devDependency, keeping its fields and indentation; one naming TypeScript is left alone', () => {
  const dir = path.join(work, 'existing');
  fs.mkdirSync(dir);
  const before = {
    name: 'my-teams',
    version: '1.0.0',
    private: true,
    dependencies: { troupe: 'file:../troupe-0.1.0.tgz' },
    devDependencies: { prettier: '3.0.0' },
  };
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(before, null, 4));
  const r = init(dir);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /package\.json \(devDependencies\.typescript\)/);
  const text = fs.readFileSync(path.join(dir, 'package.json'), 'utf8');
  assert.equal(text, `${JSON.stringify({ ...before, devDependencies: { prettier: '3.0.0', typescript: pinned } }, null, 4)}\n`);

  const own = path.join(work, 'own-typescript');
  fs.mkdirSync(own);
  const mine = JSON.stringify({ name: 'mine', devDependencies: { typescript: '^5.4.0' } });
  fs.writeFileSync(path.join(own, 'package.json'), mine);
  assert.equal(init(own).status, 0);
  assert.equal(fs.readFileSync(path.join(own, 'package.json'), 'utf8'), mine);
});

it('what the first train says when TypeScript is listed but not yet installed: run npm install', () => {
  const dir = path.join(work, 'fresh');
  assert.equal(noTypeScriptReason(dir), 'TypeScript is in package.json but not installed (run npm install)');
  assert.equal(noTypeScriptReason(path.join(work, 'nowhere')), 'TypeScript is not installed (npm install -D typescript)');
});
