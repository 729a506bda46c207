// A project team's type errors, found before a run starts (processes/type-check.ts).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';
import { readProject } from '../../../processes/project';
import { typeCheckTeam } from '../../../processes/type-check';

const TSCONFIG = JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'commonjs', strict: true, noEmit: true, types: [] } });

function project(files: Record<string, string>) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-typecheck-'));
  for (const [f, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    fs.writeFileSync(path.join(dir, f), text);
  }
  return dir;
}

test("errors in a team's own files (its module and local imports) are listed, file:line:col; other teams and unrelated files are not", () => {
  const dir = project({
    'troupe.config.ts': "export default { teams: { a: './teams/a.ts', b: './teams/b.ts' } };\n",
    'tsconfig.json': TSCONFIG,
    'teams/a.ts': "import { half } from './lib/half';\nexport default { name: 'a', value: half(4) };\n",
    'teams/lib/half.ts': 'export function half(n: number): number {\n  const s: string = n / 2;\n  return s;\n}\n',
    'teams/b.ts': "export default { name: 'b', value: 1 };\n",
    'unrelated.ts': 'export const broken: number = "x";\n',
  });
  try {
    const p = readProject(path.join(dir, 'troupe.config.ts'));
    const a = typeCheckTeam(p, 'a');
    assert.equal(a.skipped, undefined);
    assert.deepEqual(a.errors, [
      "teams/lib/half.ts:2:9: Type 'number' is not assignable to type 'string'.",
      "teams/lib/half.ts:3:3: Type 'string' is not assignable to type 'number'.",
    ]);
    assert.deepEqual(typeCheckTeam(p, 'b'), { errors: [] });
    // Cached by content: the same answer from .troupe/type-check/, a new one once the file is fixed.
    assert.equal(fs.readdirSync(path.join(dir, '.troupe', 'type-check')).length, 2);
    assert.deepEqual(typeCheckTeam(p, 'a'), a);
    fs.writeFileSync(path.join(dir, 'teams/lib/half.ts'), 'export function half(n: number): number {\n  return n / 2;\n}\n');
    assert.deepEqual(typeCheckTeam(p, 'a'), { errors: [] });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('without a tsconfig.json nothing is checked, and the result says why', () => {
  const dir = project({ 'troupe.config.ts': "export default { teams: { a: './a.ts' } };\n", 'a.ts': 'export default { n: 1 as string };\n' });
  try {
    const r = typeCheckTeam(readProject(path.join(dir, 'troupe.config.ts')), 'a');
    assert.deepEqual(r, { errors: [], skipped: 'the project has no tsconfig.json' });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
