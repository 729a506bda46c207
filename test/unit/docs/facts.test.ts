/**
 * Facts the docs state that code decides, checked against the code, so the docs cannot
 * drift: the number of conformance checks in docs/engines.md is the length of the list the
 * conformance runner runs (engines/conformance's CHECKS), however the checks are filed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { CHECKS } from '../../../engines/conformance';
import { repoRoot } from '../../../infra/paths';

test("docs/engines.md gives the conformance suite's number of checks", () => {
  const doc = fs.readFileSync(path.join(repoRoot, 'docs', 'engines.md'), 'utf8');
  const stated = /conformance suite \(`engines\/conformance\/`, (\d+) checks/.exec(doc)?.[1];
  assert.ok(stated, 'docs/engines.md no longer says "conformance suite (`engines/conformance/`, N checks": update this test with it');
  assert.equal(
    Number(stated),
    CHECKS.length,
    `docs/engines.md says ${stated} conformance checks; the suite runs ${CHECKS.length}: write ${CHECKS.length} there`,
  );
});
