/**
 * The patch ids in workflows/patches.ts and the table in docs/contributing.md
 * ("Workflow patches") name the same ids, and workflow code calls patched()
 * only with those constants: an id added in code and not documented, or
 * documented and gone from the code, fails here.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { Patch } from '../../../workflows/patches';

const root = path.join(__dirname, '..', '..', '..');

/** The backticked ids in the first column of the table under "## Workflow patches". */
function documentedIds(markdown: string): string[] {
  const section = markdown.split(/^## /m).find((s) => s.startsWith('Workflow patches\n'));
  assert.ok(section, 'docs/contributing.md has a "## Workflow patches" section');
  return [...section.matchAll(/^\| `([^`]+)` +\|/gm)].map((m) => m[1]!);
}

function workflowSources(dir: string): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? workflowSources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : []));
}

test('every patch id in workflows/patches.ts is in the docs table, and the table names no other', () => {
  const documented = documentedIds(fs.readFileSync(path.join(root, 'docs', 'contributing.md'), 'utf8'));
  const inCode = Object.values(Patch);
  assert.equal(new Set(documented).size, documented.length, `an id listed twice: ${documented}`);
  assert.deepEqual(
    inCode.filter((id) => !documented.includes(id)),
    [],
    'ids in code missing from docs/contributing.md',
  );
  assert.deepEqual(
    documented.filter((id) => !(inCode as string[]).includes(id)),
    [],
    'ids in docs/contributing.md not in workflows/patches.ts',
  );
});

test('workflow code calls patched() only with a Patch constant, and uses each one', () => {
  const files = workflowSources(path.join(root, 'workflows'));
  const read = (f: string) => fs.readFileSync(f, 'utf8');
  // patches.ts itself decides every id in a loop (decidePatches)
  const calls = files.filter((f) => path.basename(f) !== 'patches.ts').flatMap((f) => [...read(f).matchAll(/\bpatched\(([^)]+)\)/g)].map((m) => m[1]!));
  assert.ok(calls.length > 0);
  assert.deepEqual(
    calls.filter((arg) => !/^Patch\.\w+$/.test(arg)),
    [],
    'patched() with a literal id',
  );
  const used = new Set(files.flatMap((f) => [...read(f).matchAll(/\bPatch\.(\w+)/g)].map((m) => m[1]!)));
  assert.deepEqual(
    Object.keys(Patch).filter((k) => !used.has(k)),
    [],
    'constants no workflow uses',
  );
});
