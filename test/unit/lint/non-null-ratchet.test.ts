/**
 * The ratchet on non-null assertions (`x!`) in product code (tools/eslint/non-null-ratchet.js):
 * the count may only go down, and the stored number follows it down.
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';

const ratchet = require(path.join(__dirname, '..', '..', '..', 'tools', 'eslint', 'non-null-ratchet.js')) as {
  countNonNull(): Record<string, number>;
  storedBudget(): number;
  BUDGET_FILE: string;
};

test('non-null assertions in product code only go down', () => {
  const byFile = ratchet.countNonNull();
  const count = Object.values(byFile).reduce((a, b) => a + b, 0);
  const budget = ratchet.storedBudget();
  const file = path.relative(process.cwd(), ratchet.BUDGET_FILE);
  const most = Object.entries(byFile)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 8)
    .map(([f, n]) => `${f} ${n}`)
    .join(', ');
  assert.ok(
    count <= budget,
    `${count} non-null assertions (x!) in product code, more than the ${budget} allowed (${file}). ` +
      'Take the new ones out: narrow with a check, use `?? fallback`, or throw an error that says what was missing. ' +
      `Most per file: ${most}`,
  );
  assert.ok(
    count >= budget,
    `${count} non-null assertions (x!) in product code, fewer than the ${budget} stored: well done. ` +
      `Lower "nonNullAssertions" in ${file} to ${count}, so the ratchet keeps the gain.`,
  );
});
