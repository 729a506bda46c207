#!/usr/bin/env node
'use strict';
// `npm run lint` (and `npm test` before the unit tests): ESLint over the TypeScript and JavaScript
// (eslint.config.mjs), Prettier's check of formatting, and flake8 over the Python engine and bench
// (.flake8) when flake8 is installed (Debian: apt-get install flake8), else that step says SKIPPED.
// Exits non-zero when any step fails.
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const repoRoot = path.resolve(__dirname, '..');
const log = (line) => process.stderr.write(line + '\n');

function run(name, cmd, args) {
  const t0 = Date.now();
  const r = spawnSync(cmd, args, { cwd: repoRoot, stdio: 'inherit' });
  const ok = r.status === 0;
  log(`troupe lint: ${name}: ${ok ? 'ok' : r.error ? `failed (${r.error.message})` : 'failed (above)'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return ok;
}

function lint() {
  const node = process.execPath;
  const bin = (...p) => path.join(repoRoot, 'node_modules', ...p); // not in the packages' exports
  let ok = run('eslint', node, [bin('eslint', 'bin', 'eslint.js'), '--max-warnings=0', '.']);
  ok = run('prettier --check', node, [bin('prettier', 'bin', 'prettier.cjs'), '--check', '--log-level=warn', '.']) && ok;
  if (spawnSync('flake8', ['--version'], { stdio: 'ignore' }).status === 0) ok = run('flake8', 'flake8', []) && ok;
  else log('troupe lint: flake8: SKIPPED (not installed; Debian: apt-get install flake8)');
  return ok;
}

module.exports = { lint };

if (require.main === module) process.exit(lint() ? 0 : 1);
