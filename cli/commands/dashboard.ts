// troupe dashboard: serve the dashboard in the foreground (`troupe up` runs it in the background).
import { startDashboard } from '../../dashboard/server';
import { loadConfig, temporalAddressOf } from '../../infra/config';
import { connect } from '../../infra/db';
import { ensureDatabase } from '../../infra/postgres';
import { connectTemporal, temporalClient } from '../../infra/temporal';
import { defineCommand } from '../command';

export default defineCommand({
  name: 'dashboard',
  summary: 'Serve the dashboard (runs, live per-agent curves, episode graphs) until stopped',
  usage: 'troupe dashboard [--temporal-ui <url>]',
  description: [
    'Listens on TROUPE_DASHBOARD_HOST:TROUPE_DASHBOARD_PORT (default 127.0.0.1:8234) and reads the store read-only.',
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
    // Controls only: without a token no Temporal connection is needed.
    const connection = config.dashboardToken ? await connectTemporal(temporalAddressOf(config)) : undefined;
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
