/** Headless Chromium for the dashboard's browser tests (Debian's `chromium`, driven by playwright-core). */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { repoRoot } from '../../../infra/paths';

export const CHROMIUM = process.env.TROUPE_CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = path.join(repoRoot, '.troupe', 'test-artifacts');

/** Why the browser tests cannot run here, or undefined when they can. */
export function browserSkipReason(): string | undefined {
  if (fs.existsSync(CHROMIUM)) return undefined;
  const reason = `no Chromium at ${CHROMIUM} (apt-get install chromium, or set TROUPE_CHROMIUM): browser tests SKIPPED`;
  process.stderr.write(`troupe test: ${reason}\n`);
  return reason;
}

export async function launchBrowser() {
  const { chromium } = await import('playwright-core');
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  return {
    context,
    async close() {
      await context.close();
      fs.rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}
