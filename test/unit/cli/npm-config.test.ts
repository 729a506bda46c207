/**
 * `npx troupe` (and any npm command in the checkout) prints no
 * `npm warn Unknown project config`: the project's npm config holds only keys npm
 * knows. onnxruntime-node still installs CPU-only when Troupe runs `npm ci`: its
 * install script (node_modules/onnxruntime-node/script/install-utils.js) reads
 * ONNXRUNTIME_NODE_INSTALL, which stack/install.js sets to "skip" unless the user chose.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { it } from 'node:test';
import { repoRoot } from '../../../infra/paths';

const { npmEnv } = require('../../../stack/install.js') as { npmEnv: (env?: NodeJS.ProcessEnv) => NodeJS.ProcessEnv };

it('npm reads the project config without a warning about unknown keys', () => {
  const r = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['config', 'get', 'fund'], { cwd: repoRoot, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stderr, /Unknown (project|user|global|env) config/);
});

it("Troupe's npm ci skips onnxruntime-node's CUDA download unless the user opts in", () => {
  assert.equal(npmEnv({ PATH: '/bin' }).ONNXRUNTIME_NODE_INSTALL, 'skip');
  assert.equal(npmEnv({ ONNXRUNTIME_NODE_INSTALL: 'cuda12' }).ONNXRUNTIME_NODE_INSTALL, 'cuda12');
  // the variable the installed onnxruntime-node reads (a version that stopped would download again)
  const utils = fs.readFileSync(path.join(repoRoot, 'node_modules', 'onnxruntime-node', 'script', 'install-utils.js'), 'utf8');
  assert.match(utils, /process\.env\.ONNXRUNTIME_NODE_INSTALL\b/);
});
