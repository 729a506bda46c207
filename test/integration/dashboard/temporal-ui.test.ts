/**
 * A run's Current Details in the real Temporal Web UI (the dev server's, in
 * headless Chromium): its first line, the whole state with the dashboard link,
 * is shown whole, not cut off. Screenshot: .troupe/test-artifacts/temporal-ui-current-details.png
 * (docs/temporal-ui-current-details.png is one).
 */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { after, before, it } from 'node:test';
import { startTemporal } from '../../../testing/temporal';
import { startHarness, type Harness } from '../../../testing/stack';
import { freePort } from '../../helpers';
import { ARTIFACTS, browserSkipReason, launchBrowser } from './browser';

const skip = browserSkipReason();
let h: Harness | undefined;
let uiPort = 0;
before(async () => {
  if (skip) return;
  uiPort = await freePort();
  h = await startHarness({ env: await startTemporal({ uiPort }), dashboardUrl: 'http://127.0.0.1:8234' });
});
after(async () => {
  await h?.shutdown();
  await h?.env.teardown();
});

it('Current Details shows the one-line state and the dashboard link first', { skip }, async () => {
  const runId = 'ui-details';
  await h!.env.client.workflow.execute('trainingRun', {
    taskQueue: h!.taskQueue,
    workflowId: runId,
    args: [{ team: 'math', steps: 2, groupsPerStep: 1, groupSize: 2, evalEvery: 1, evalTasks: 2, seed: 3 }],
  });
  const browser = await launchBrowser();
  try {
    const page = await browser.context.newPage();
    await page.goto(`http://127.0.0.1:${uiPort}/namespaces/default/workflows/${runId}`, { waitUntil: 'networkidle' });
    // Current Details is on the User Metadata tab
    await page
      .getByRole('link', { name: 'User Metadata' })
      .or(page.getByRole('tab', { name: 'User Metadata' }))
      .first()
      .click();
    // the UI renders the Markdown in a frame of its own
    const details = page.frameLocator('iframe').first();
    const link = details.getByRole('link', { name: 'dashboard', exact: true });
    await link.first().waitFor({ timeout: 30_000 });
    assert.equal(await link.first().getAttribute('href'), `http://127.0.0.1:8234/#/runs/${runId}`);
    assert.ok(await link.first().isVisible(), 'the link is shown');
    // the first line, link included, is shown whole: the link lies inside the visible page
    const box = (await link.first().boundingBox())!;
    assert.ok(box.x + box.width <= page.viewportSize()!.width, `the link ends at x=${box.x + box.width}`);
    assert.match(
      await details.locator('body').innerText(),
      /math run ui-details: step .*\(completed\) · eval 0\.\d{3} at step 2 \(from 0\.\d{3}\) · dashboard/,
    );
    await page.screenshot({ path: path.join(ARTIFACTS, 'temporal-ui-current-details.png') });
  } finally {
    await browser.close();
  }
});
