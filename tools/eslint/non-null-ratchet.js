'use strict';
// The ratchet on non-null assertions (`x!`): their count in product code may only go down.
// test/unit/lint/non-null-ratchet.test.ts compares the count with the number stored in
// tools/eslint/non-null-budget.json and fails when it rises (remove the new ones) or falls
// (lower the stored number, so the ratchet holds the gain).
//
// Product code: every .ts file of the repository except tests and tooling (the folders in
// NOT_PRODUCT), generated code and build output, so a folder added or moved is counted.
const fs = require('node:fs');
const path = require('node:path');
const ts = require('typescript');

const repoRoot = path.resolve(__dirname, '..', '..');
const BUDGET_FILE = path.join(__dirname, 'non-null-budget.json');
const NOT_PRODUCT = new Set(['test', 'bench', 'tools', 'testing', 'examples']);
const SKIP = new Set(['node_modules', 'dist', 'gen', '.troupe', '.git']);

function productFiles(dir = repoRoot, top = true) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(e.name) || e.name.startsWith('.gen') || (top && NOT_PRODUCT.has(e.name))) continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...productFiles(p, false));
    else if (e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Non-null assertions per product file (repo-relative path → count), files without any left out. */
function countNonNull() {
  const byFile = {};
  for (const file of productFiles()) {
    const src = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
    let n = 0;
    const visit = (node) => {
      if (node.kind === ts.SyntaxKind.NonNullExpression) n++;
      ts.forEachChild(node, visit);
    };
    visit(src);
    if (n > 0) byFile[path.relative(repoRoot, file).split(path.sep).join('/')] = n;
  }
  return byFile;
}

const storedBudget = () => JSON.parse(fs.readFileSync(BUDGET_FILE, 'utf8')).nonNullAssertions;

module.exports = { countNonNull, storedBudget, BUDGET_FILE, productFiles };
