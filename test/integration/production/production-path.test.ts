/**
 * The production path (docs/operations.md), end to end: a real Temporal server 1.29.1 built
 * from its Go module (once per machine, cached in <cache>/bin next to the CLI), on PostgreSQL
 * with temporal-sql-tool's schema, mTLS on its frontend; a namespace and Troupe's search
 * attributes; a control worker and two pool workers as separate processes with TLS and the
 * payload codec on. The bundled math team trains a few steps uninterrupted; then the same run
 * again while the server and one pool worker are SIGKILLed mid-step and the server restarted.
 * The two must end bit-identical (testing/chaos/compare.ts: every version's weights and optimizer
 * state, every stored episode).
 *
 * Skips, saying so, only when the server binaries are not cached and Go is absent.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import { test } from 'node:test';
import { Connection, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { startTrainingRun, validateRunConfig } from '../../../control/runs';
import { errorMessage } from '../../../infra/errors';
import { goVersion } from '../../../stack/temporal';
import { temporalClient, temporalConnectionOptions } from '../../../infra/temporal-connection';
import { ensureTemporalServerBinaries, temporalServerBinariesCached } from '../../../stack/temporal-server';
import type { RunSummary, trainingRun } from '../../../workflows/training-run';
import { compareRuns, loadStoredRun } from '../../../testing/chaos/compare';
import { createTestDatabase, testDatabaseServer } from '../../helpers';
import { SERVER_NAME, startCluster } from '../../../testing/production';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const STEPS = 6;
const runConfig = (runId: string) =>
  validateRunConfig({ team: 'math', steps: STEPS, groupsPerStep: 4, groupSize: 8, rollout: 'batched', evalEvery: 3, evalTasks: 4, seed: 7, runId });

/** The run's result, waiting through the server's restart. */
async function outcome(handle: WorkflowHandle<typeof trainingRun>, timeoutMs: number): Promise<RunSummary> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await handle.result();
    } catch (e) {
      if (e instanceof WorkflowFailedError || Date.now() > deadline) throw e;
      await sleep(1000);
    }
  }
}

const noGo = !temporalServerBinariesCached() && !goVersion();

test(
  'production path: Temporal server on PostgreSQL with mTLS, two pool workers; kill -9 of the server and a pool worker mid-run ends bit-identical',
  { timeout: 1_800_000, skip: noGo ? 'Go is not installed and the Temporal server binaries are not cached: cannot build go.temporal.io/server' : false },
  async (t) => {
    const log = (line: string) => t.diagnostic(line);
    const timings: Record<string, number> = {};
    const timed = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
      const t0 = Date.now();
      try {
        return await fn();
      } finally {
        timings[name] = (Date.now() - t0) / 1000;
      }
    };
    const wasCached = temporalServerBinariesCached();
    const bins = await timed(wasCached ? 'binaries (cached)' : 'build (go install)', () => ensureTemporalServerBinaries({ log }));
    const store = await createTestDatabase();
    const server = await testDatabaseServer();
    const cluster = await timed('schema + certs + server start + namespace', () =>
      startCluster({ serverBin: bins.server, sqlTool: bins.sqlTool, serverUrl: server.url, troupeDatabaseUrl: store.url, log }),
    );
    let connection: Connection | undefined;
    try {
      // mTLS: without a client certificate, or with one from another CA, or in plain text, the frontend refuses.
      const refused = async (what: string, opts: Parameters<typeof Connection.connect>[0]) => {
        const c = await Connection.connect({ ...opts, connectTimeout: 5000 }).catch((e: unknown) => e as Error);
        if (c instanceof Error) return log(`${what}: refused (${errorMessage(c).slice(0, 100)})`);
        try {
          await assert.rejects(
            c.withDeadline(Date.now() + 5000, () => c.workflowService.getSystemInfo({})),
            `${what} must be refused`,
          );
        } finally {
          await c.close();
        }
      };
      const tls = temporalConnectionOptions(cluster.config).tls!;
      await refused('no client certificate', {
        address: cluster.address,
        tls: { serverNameOverride: SERVER_NAME, serverRootCACertificate: tls.serverRootCACertificate },
      });
      await refused('a certificate from another CA', {
        address: cluster.address,
        tls: {
          ...tls,
          clientCertPair: { crt: new Uint8Array(fs.readFileSync(cluster.certs.strangerCert)), key: new Uint8Array(fs.readFileSync(cluster.certs.strangerKey)) },
        },
      });
      await refused('plain text', { address: cluster.address });
      connection = await cluster.connect();
      const info = await connection.workflowService.getSystemInfo({});
      log(`with the client certificate: server ${info.serverVersion}`);
      assert.equal(info.serverVersion, '1.29.1');

      await timed('workers start', async () => {
        for (const name of ['control-worker', 'pool-worker-1', 'pool-worker-2']) cluster.startWorker(name);
        await cluster.waitForPollers(['control-worker', 'pool-worker-1', 'pool-worker-2']);
      });
      const client = temporalClient(connection, cluster.namespace, cluster.config);

      const baseline = await timed('uninterrupted run', async () =>
        outcome(await startTrainingRun(client, cluster.config.taskQueue, runConfig('prod-uninterrupted')), 900_000),
      );
      assert.equal(baseline.status, 'completed');

      const kills = await timed('interrupted run', async () => {
        const handle = await startTrainingRun(client, cluster.config.taskQueue, runConfig('prod-interrupted'));
        // Mid-run: once two steps are committed, while the third is rolling out.
        for (;;) {
          const [row] = await store.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM steps WHERE run_id = 'prod-interrupted' AND status = 'completed'`;
          if (row!.n >= 2) break;
          await sleep(200);
        }
        const poolPid = await cluster.killWorker('pool-worker-1');
        const serverPid = await cluster.killServer();
        const killedAt = Date.now();
        log(`killed (SIGKILL) the Temporal server (pid ${serverPid}) and pool-worker-1 (pid ${poolPid}) after step 2`);
        await sleep(3000);
        await cluster.startServer();
        log(`server back after ${((Date.now() - killedAt) / 1000).toFixed(1)} s`);
        const summary = await outcome(handle, 900_000);
        assert.equal(summary.status, 'completed');
        return { serverPid, poolPid };
      });
      assert.ok(kills.serverPid && kills.poolPid);

      const models = Object.keys(baseline.versions);
      const cmp = compareRuns(await loadStoredRun(store.sql, 'prod-uninterrupted'), await loadStoredRun(store.sql, 'prod-interrupted'), STEPS, models);
      assert.deepEqual(cmp.problems, [], 'the interrupted run differs from the uninterrupted one');
      assert.equal(cmp.versionsCompared, (STEPS + 1) * models.length);
      assert.ok(cmp.episodesCompared > 0);
      log(
        `bit-identical: ${cmp.versionsCompared} versions, ${cmp.episodesCompared} episodes; final weights ${Object.entries(cmp.finalSha)
          .map(([m, s]) => `${m} ${s.slice(0, 12)}`)
          .join(', ')}`,
      );
    } finally {
      await connection?.close().catch(() => undefined);
      await timed('shutdown', () => cluster.shutdown());
      await store.drop();
      log(
        `timings (s): ${Object.entries(timings)
          .map(([k, v]) => `${k} ${v.toFixed(1)}`)
          .join(', ')}`,
      );
    }
  },
);
