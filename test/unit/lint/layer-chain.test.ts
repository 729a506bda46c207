/**
 * The layer chain docs/architecture.md shows ("Folders and layers") is the table the lint
 * enforces (tools/eslint/layers.js LAYERS), so the page cannot drift from the rule.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../../infra/paths';

const layers = require(path.join(repoRoot, 'tools', 'eslint', 'layers.js')) as { LAYERS: string[][]; layerName: (i: number) => string };

test("docs/architecture.md's layer chain is tools/eslint/layers.js's table", () => {
  const page = fs.readFileSync(path.join(repoRoot, 'docs', 'architecture.md'), 'utf8');
  const section = page.slice(page.indexOf('## Folders and layers'));
  const block = /```\n([\s\S]*?)```/.exec(section);
  assert.ok(block, 'docs/architecture.md: no code block under "## Folders and layers"');
  const documented = block[1]!.split('<').map((s) => s.trim());
  const enforced = layers.LAYERS.map((_, i) => layers.layerName(i));
  assert.deepEqual(documented, enforced, 'update the chain in docs/architecture.md (or the table in tools/eslint/layers.js) so the two agree');
});
