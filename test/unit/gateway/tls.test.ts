/**
 * The gateway over HTTPS for agent code on another host: a self-signed CA and a server
 * certificate made here with openssl, the gateway configured by TROUPE_GATEWAY_TLS_* (as a
 * deployment sets them), and the real `openai` client in a process of its own trusting the
 * CA (NODE_EXTRA_CA_CERTS), against a real engine. Checked: an episode over https records
 * exactly the turns the same agent code records over http; a wrong key is refused (401,
 * param apiKey) and so are plain http to the TLS port and a client that does not trust the
 * CA, none of them recording a turn; bound to this machine's non-loopback address, the
 * gateway serves a session there.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { GatewayServer, gatewayListen } from '../../../gateway';
import { loadConfig } from '../../../infra/config';
import { makeCa, makeLeaf } from '../../../testing/certs';
import { assertExact, sampledTurns, suiteEngine, type EngineLog } from './engine';
import { gatewayTeam } from './team';

const AGENT = path.join(__dirname, 'remote-agent.ts');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-gateway-tls-'));
/** An address of this machine that other hosts reach (eth0's), if it has one. */
const remoteIp = Object.values(os.networkInterfaces())
  .flat()
  .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
const ca = makeCa(dir, 'gateway-ca');
const leaf = makeLeaf(
  dir,
  'gateway',
  'gateway-ca',
  `subjectAltName=IP:127.0.0.1,DNS:localhost${remoteIp ? `,IP:${remoteIp}` : ''}\nextendedKeyUsage=serverAuth`,
);
const TLS_ENV = { TROUPE_GATEWAY_TLS_CERT_PATH: leaf.cert, TROUPE_GATEWAY_TLS_KEY_PATH: leaf.key };

interface AgentResult {
  replies: string[];
  error?: { name: string; status?: number; param?: string; code?: string; causes: string[] };
}

/** The agent's code in a process of its own, on the session it is given; the CA trusted as a remote agent would (NODE_EXTRA_CA_CERTS). */
async function remoteAgent(session: { baseURL: string; apiKey: string }): Promise<AgentResult> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', AGENT], {
    env: { ...process.env, OPENAI_BASE_URL: session.baseURL, OPENAI_API_KEY: session.apiKey, NODE_EXTRA_CA_CERTS: ca },
    timeout: 60_000,
  });
  return JSON.parse(stdout) as AgentResult;
}

describe('gateway over TLS', () => {
  const engine = suiteEngine(20, { runId: 'gw-tls', seed: 3 });
  /** Sessions on `gateway`, else on this thread's (openGatewaySessions: started from the environment). */
  const io = (gateway: GatewayServer | undefined, log: EngineLog = []) => engine.io('gw-tls', log, gateway && (async (ep) => gateway.open(ep)));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const input = (episodeId: string) => ({ episodeId, seed: 21, task: 0, versions: { policy: 0, other: 0 } });

  it('an episode over https (configured by TROUPE_GATEWAY_TLS_*) records exactly the turns it records over http', async () => {
    const plain = await GatewayServer.start();
    const baseURLs: string[] = [];
    const remoteTeam = gatewayTeam(async ({ agents }) => {
      baseURLs.push(agents.solver.openai.baseURL);
      return remoteAgent(agents.solver.openai);
    });
    try {
      const overHttp = await runBatchedEpisode(remoteTeam, input('h'), io(plain));
      // this thread's gateway, started on first use from the environment as an episode thread's is
      Object.assign(process.env, TLS_ENV);
      const log: EngineLog = [];
      let overHttps;
      try {
        overHttps = await runBatchedEpisode(remoteTeam, input('s'), io(undefined, log));
      } finally {
        for (const k of Object.keys(TLS_ENV)) delete process.env[k];
      }
      assert.match(baseURLs[0]!, /^http:\/\/127\.0\.0\.1:\d+\/s\/[\w-]+\/v1$/);
      assert.match(baseURLs[1]!, /^https:\/\/127\.0\.0\.1:\d+\/s\/[\w-]+\/v1$/);
      for (const t of [overHttp, overHttps]) {
        assert.equal(t.status, 'completed', t.error);
        assert.equal((t.outcome as AgentResult).error, undefined, JSON.stringify(t.outcome));
        assert.equal(t.turns.length, 2);
      }
      assert.deepEqual(overHttps.outcome, overHttp.outcome);
      assert.deepEqual(sampledTurns(overHttps), sampledTurns(overHttp));
      // and they are what the engine was given and sampled
      assertExact(overHttps.turns, log);
    } finally {
      await plain.close();
    }
  });

  it('a wrong key, plain http to the TLS port and an untrusted CA are refused; nothing is recorded', async () => {
    const secure = await GatewayServer.start(gatewayListen(loadConfig(TLS_ENV).gateway));
    const seen: Record<string, unknown> = {};
    const team = gatewayTeam(async ({ agents }) => {
      const s = agents.solver.openai;
      seen.wrongKey = await remoteAgent({ ...s, apiKey: 'sk-troupe-not-this-episodes' });
      seen.plainHttp = await remoteAgent({ ...s, baseURL: s.baseURL.replace(/^https:/, 'http:') });
      // this process does not trust the test CA
      seen.untrusted = await new OpenAI({ ...s, maxRetries: 0 }).models.list().then(
        () => 'answered',
        (e: unknown) => e,
      );
      return null;
    });
    try {
      const t = await runBatchedEpisode(team, input('x'), io(secure));
      assert.equal(t.status, 'completed', t.error);
      const wrongKey = seen.wrongKey as AgentResult;
      assert.deepEqual(
        { ...wrongKey.error, causes: undefined },
        { name: 'AuthenticationError', status: 401, param: 'apiKey', code: 'invalid_api_key', causes: undefined },
        JSON.stringify(wrongKey),
      );
      const plainHttp = seen.plainHttp as AgentResult;
      assert.equal(plainHttp.error?.name, 'APIConnectionError', JSON.stringify(plainHttp));
      assert.ok(seen.untrusted instanceof OpenAI.APIConnectionError, String(seen.untrusted));
      assert.match(causesOf(seen.untrusted).join('\n'), /certificate|UNABLE_TO_VERIFY|SELF_SIGNED/i);
      assert.equal(t.turns.length, 0, 'no refused call is a turn');
    } finally {
      await secure.close();
    }
  });

  it('bound to a non-loopback address with TLS, it serves a session there', async (t) => {
    if (!remoteIp) return t.skip('this machine has no non-loopback IPv4 address');
    const remote = await GatewayServer.start(gatewayListen(loadConfig({ ...TLS_ENV, TROUPE_GATEWAY_HOST: remoteIp }).gateway));
    const log: EngineLog = [];
    let baseURL = '';
    const team = gatewayTeam(async ({ agents }) => {
      baseURL = agents.solver.openai.baseURL;
      return remoteAgent(agents.solver.openai);
    });
    try {
      const traj = await runBatchedEpisode(team, input('r'), io(remote, log));
      assert.equal(baseURL.startsWith(`https://${remoteIp}:`), true, baseURL);
      assert.equal(traj.status, 'completed', traj.error);
      assert.equal((traj.outcome as AgentResult).error, undefined, JSON.stringify(traj.outcome));
      assert.equal(traj.turns.length, 2);
      assertExact(traj.turns, log);
    } finally {
      await remote.close();
    }
  });
});

const causesOf = (e: unknown): string[] => (e instanceof Error ? [`${(e as { code?: string }).code ?? ''} ${e.message}`, ...causesOf(e.cause)] : []);
