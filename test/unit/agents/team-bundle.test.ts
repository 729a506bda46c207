/**
 * A team module with a syntax error does not fail the workflow bundle (and so
 * the control worker): it is bundled as a module that throws when its team is
 * loaded. Without the hook, webpack fails the whole bundle. The build cache
 * (bundleCache) rebuilds an edited module and is held by one process at a time.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { bundleWorkflowCode, DefaultLogger, Runtime } from '@temporalio/worker';
import { bundleCache, isolateTeamBuildErrors } from '../../../processes/team-bundle';
import { activeProject } from '../../../processes/project';

// in the entered project (the checkout's examples/), outside its teams folder: team code, but no team
const broken = path.join(activeProject()!.dir, `.syntax-${process.pid}.ts`);
const workflows = path.join(__dirname, `.bundle-probe-${process.pid}.ts`);
const logger = new DefaultLogger('ERROR');

before(() => {
  try {
    Runtime.install({ logger });
  } catch {
    /* installed already */
  }
  fs.writeFileSync(broken, 'export const team = { name: "x" ;\n');
  fs.writeFileSync(
    workflows,
    `export async function probe(): Promise<string> {\n  try {\n    require(${JSON.stringify(broken)});\n    return 'loaded';\n  } catch (e) {\n    return 'threw: ' + (e as Error).message;\n  }\n}\n`,
  );
});
after(() => {
  fs.rmSync(broken, { force: true });
  fs.rmSync(workflows, { force: true });
  for (const f of fs.readdirSync(__dirname)) if (f.startsWith(`.bundle-probe-${process.pid}`)) fs.rmSync(path.join(__dirname, f), { force: true });
});

it('without the hook one broken team module fails the whole workflow bundle', async () => {
  await assert.rejects(bundleWorkflowCode({ workflowsPath: workflows, logger }), /Webpack finished with errors/);
});

it('with it the bundle builds, and the broken module throws only when required', async () => {
  const { code } = await bundleWorkflowCode({ workflowsPath: workflows, logger, webpackConfigHook: isolateTeamBuildErrors });
  assert.match(code, /Module build failed/);
  assert.ok(code.includes(`.syntax-${process.pid}.ts`));
});

it("the build cache: an edited module is rebuilt, not restored stale; one process holds a cache folder at a time; a gone project's folder is removed", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-bundle-cache-'));
  const team = path.join(activeProject()!.dir, `.cached-${process.pid}.ts`);
  const entry = path.join(__dirname, `.bundle-probe-${process.pid}-cached.ts`);
  try {
    const dir = path.join(root, 'cache');
    fs.writeFileSync(entry, `export async function probe(): Promise<string> {\n  return require(${JSON.stringify(team)}).value;\n}\n`);
    const build = async (value: string) => {
      fs.writeFileSync(team, `export const value = ${JSON.stringify(value)};\n`);
      const cache = bundleCache(dir, {});
      assert.ok(cache.held);
      try {
        return (await bundleWorkflowCode({ workflowsPath: entry, logger, webpackConfigHook: cache.hook })).code;
      } finally {
        cache.release();
      }
    };
    assert.ok((await build('first-build')).includes('first-build'));
    assert.ok(fs.readdirSync(dir).length > 0, 'webpack wrote its cache');
    const again = await build('second-build');
    assert.ok(again.includes('second-build') && !again.includes('first-build'), 'the edited module was rebuilt');

    const holder = bundleCache(dir, {});
    const other = bundleCache(dir, {});
    assert.ok(holder.held && !other.held, 'a second process bundles without the held cache');
    assert.equal((other.hook({}) as { cache?: unknown }).cache, undefined);
    holder.release();
    // a lock whose process is gone is taken over
    const dead = spawnSync(process.execPath, ['-e', '0']).pid;
    fs.writeFileSync(`${dir}.lock`, String(dead));
    const next = bundleCache(dir, {});
    assert.ok(next.held);
    next.release();
    assert.equal(bundleCache(dir, { TROUPE_BUNDLE_CACHE: '0' }).held, false, 'TROUPE_BUNDLE_CACHE=0 turns it off');

    // the folders of projects that are gone go, unless a live process holds them; others stay
    const sibling = (name: string, project: string) => {
      fs.mkdirSync(path.join(root, name, 'pack'), { recursive: true });
      fs.writeFileSync(path.join(root, `${name}.project`), project);
    };
    sibling('gone', path.join(root, 'no-such-project'));
    sibling('held', path.join(root, 'no-such-project'));
    fs.writeFileSync(path.join(root, 'held.lock'), String(process.pid));
    sibling('alive', root);
    bundleCache(dir, {}).release();
    assert.deepEqual(fs.readdirSync(root).sort(), ['alive', 'alive.project', 'cache', 'cache.project', 'held', 'held.lock', 'held.project']);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
    fs.rmSync(team, { force: true });
    fs.rmSync(entry, { force: true });
  }
});
