/**
 * A team module with a syntax error does not fail the workflow bundle (and so
 * the control worker): it is bundled as a module that throws when its team is
 * loaded. Without the hook, webpack fails the whole bundle.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { bundleWorkflowCode, DefaultLogger, Runtime } from '@temporalio/worker';
import { isolateTeamBuildErrors } from '../../../processes/team-bundle';
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
