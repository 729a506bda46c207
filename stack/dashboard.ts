/**
 * The dashboard as a background service of `troupe up`: started once (pid file
 * `<state>/dashboard.pid`, stopped by `troupe down`), reused while it runs.
 */
import { isWildcard, urlHost, type TroupeConfig } from '../infra/config';
import { repoRoot } from '../infra/paths';
import { runningService, spawnService, tailFile, pidAlive } from './processes';

export function dashboardUrl(config: TroupeConfig): string {
  // A wildcard bind is still opened through loopback on this machine.
  const host = isWildcard(config.dashboardHost) ? '127.0.0.1' : config.dashboardHost;
  return `http://${urlHost(host)}:${config.dashboardPort}`;
}

/**
 * Starts (or finds) the dashboard and waits until it answers; the line for `up`'s summary.
 * `command` is the caller's command line that serves the dashboard (`troupe dashboard`: cli/bin.js,
 * named by the CLI, not here); `--temporal-ui <url>` is appended when given.
 */
export async function ensureDashboard(
  config: TroupeConfig,
  env: NodeJS.ProcessEnv,
  command: readonly string[],
  temporalUiUrl?: string,
): Promise<{ url?: string; line: string }> {
  const url = dashboardUrl(config);
  const running = runningService(config.stateDir, 'dashboard');
  if (running) return { url, line: `dashboard    ${url} (already running, pid ${running.pid})` };
  const rec = spawnService({
    stateDir: config.stateDir,
    name: 'dashboard',
    command: command[0]!,
    args: [...command.slice(1), ...(temporalUiUrl ? ['--temporal-ui', temporalUiUrl] : [])],
    env,
    cwd: repoRoot,
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline && pidAlive(rec.pid)) {
    // Ours, not another server on that port: it answers with the pid we started.
    // Any failure (refused, or another server's HTML that is not JSON) means "not ours yet".
    const pid = await fetch(`${url}/api/config`)
      .then((r) => r.json())
      .then(
        (b) => (b as { pid?: number }).pid,
        () => undefined,
      );
    if (pid === rec.pid) return { url, line: `dashboard    ${url} (pid ${rec.pid}, log ${rec.log})` };
    await new Promise((r) => setTimeout(r, 300));
  }
  const why = tailFile(rec.log, 3).trim().split('\n').slice(-3).join(' | ');
  return { line: `dashboard    FAILED to start on ${url}: ${why || 'no answer in 30s'} (log ${rec.log}; set TROUPE_DASHBOARD_PORT for another port)` };
}
