/**
 * ESLint keeps TypeScript and JavaScript functions at most 150 lines long (max-lines-per-function
 * in eslint.config.mjs); this is the same rule for the Python engine and bench, read by Python's
 * own parser (flake8 has no such check).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { repoRoot } from '../../../infra/paths';

const MAX_LINES = 152; // as eslint.config.mjs: a body of 150 lines, with its first and last

const LIST = `
import ast, glob, json, sys
long = []
for f in sorted(glob.glob('**/*.py', recursive=True)):
    if 'node_modules' in f or '/.gen' in f or f.startswith('.troupe'):
        continue
    for n in ast.walk(ast.parse(open(f).read(), f)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            long.append([f, n.name, n.end_lineno - n.lineno + 1])
print(json.dumps(long))
`;

test(`no Python function in the repository is over ${MAX_LINES} lines`, () => {
  const r = spawnSync('python3', ['-c', LIST], { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const functions = JSON.parse(r.stdout) as Array<[string, string, number]>;
  assert.ok(functions.length > 100, `read the engine's functions: ${functions.length}`);
  const over = functions.filter(([, , n]) => n > MAX_LINES).map(([f, name, n]) => `${f} ${name}: ${n} lines`);
  assert.deepEqual(over, [], 'split these by responsibility');
});
