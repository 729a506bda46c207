// troupe dashboard: serve the dashboard in the foreground (`troupe up` runs it in the background).
import { startDashboard } from '../../dashboard/server';
import { loadConfig, temporalAddressOf } from '../../infra/config';
import { connect } from '../../infra/db';
import { errorMessage } from '../../infra/errors';
import { ensureDatabase } from '../../stack/postgres';
import { connectTemporal, temporalClient } from '../../infra/temporal-connection';
import { defineCommand } from '../command';

export default defineCommand({
  name: 'dashboard',
  summary: 'Serve the dashboard (runs, live per-agent curves, episode graphs) until stopped',
  usage: 'troupe dashboard [--temporal-ui <url>]',
  description: [
    'Listens on TROUPE_DASHBOARD_HOST:TROUPE_DASHBOARD_PORT (default 127.0.0.1:8234) and reads the store; it writes only the end of',
    'runs whose workflow closed without recording it (terminated, timed out), which it asks Temporal about when it can reach it.',
    'Run controls (pause, resume, stop, setOptimizer) are refused unless TROUPE_DASHBOARD_TOKEN is set;',
    'then a request must carry "Authorization: Bearer <token>". `troupe up` starts it in the background.',
  ].join('\n'),
  options: {
    'temporal-ui': { type: 'string', description: "the Temporal Web UI's URL, for links to each run's workflow page" },
  },
  async run({ values, log }) {
    const config = loadConfig();
    const db = await ensureDatabase(config, log);
    const sql = connect(db.url, { max: 4 });
    // Temporal: for the controls (with a token), and to record the end of runs whose workflow closed
    // without recording it (terminated, timed out); without a token the dashboard also runs without Temporal.
    const connection = await connectTemporal(temporalAddressOf(config)).catch((e: unknown) => {
      if (config.dashboardToken) throw e;
      console.error(`troupe dashboard: ${errorMessage(e)}; showing runs as the store has them`);
      return undefined;
    });
    const dash = await startDashboard({
      sql,
      port: config.dashboardPort,
      host: config.dashboardHost,
      temporalUiUrl: values['temporal-ui'],
      namespace: config.namespace,
      temporalAddress: temporalAddressOf(config),
      client: connection ? temporalClient(connection, config.namespace, config) : undefined,
      token: config.dashboardToken,
    });
    console.log(`troupe dashboard: ${dash.url} (controls ${config.dashboardToken ? 'enabled with the token' : 'disabled: TROUPE_DASHBOARD_TOKEN unset'})`);
    await new Promise<void>((resolve) => {
      process.once('SIGTERM', resolve);
      process.once('SIGINT', resolve);
    });
    await dash.close();
    await sql.end({ timeout: 2 });
    await connection?.close();
    return 0;
  },
});
