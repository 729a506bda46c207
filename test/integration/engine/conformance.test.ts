/**
 * The engine protocol v2 conformance suite (engines/conformance/) against the
 * built-in engine: every check passes, through runConformance and through
 * `troupe engine-check`. A negative control proves the suite can fail: a proxy in
 * front of the same engine that lies in Health (protocol_version 1) and drops a
 * log-prob from every generated sequence fails exactly the checks that see it.
 *
 * Another engine: set TROUPE_CONFORMANCE_ADDRESS=host:port (an engine already
 * running, e.g. engines/pytorch/) and the last test runs the same suite against it,
 * skipping the ids in TROUPE_CONFORMANCE_SKIP (comma-separated); from code it is
 * `assertConformant(address, { skip })` of gpu-workers/conformance.
 *
 *   node --import tsx --test test/integration/engine/conformance.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { assertConformant, type ConformanceReport, formatResult, runConformance, selectChecks } from '../../../engines/conformance';
import { type Outcome, type Req, WireClient, type WireError } from '../../../engines/conformance/wire-client';
import { ERROR_REASON_METADATA } from '../../../engines/protocol/errors';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';
import { engineServiceDefinition, MAX_MESSAGE_BYTES } from '../../../engines/protocol/proto';
import type * as P from '../../../engines/protocol/proto';
import type { RpcName } from '../../../engines/protocol/proto';
import { troupe } from '../../helpers/cli';

let engine: SpawnedEngine;

before(async () => {
  engine = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
});

after(() => {
  engine?.child.kill('SIGTERM');
});

const show = (rep: ConformanceReport) => rep.results.map(formatResult).join('\n');

/**
 * Checks the built-in engine is known to fail, each with why; they run and are
 * reported, but do not fail this test. Empty this list as the engine is fixed
 * (the test says when one of them passes). Was: limits.chunk-size (chunks of
 * 4 MiB + framing), generate.top-p-off (the proto said top_p >= 1 was off) and
 * batch.alone (Generate's left padding moved a row across SIMD lanes; contexts
 * are now padded to a multiple of 16, engines/onnx/README.md), all settled on main.
 */
const KNOWN_FAILURES: string[] = [];

test('the built-in engine passes every check of the conformance suite', async () => {
  const t0 = Date.now();
  const rep = await runConformance(engine.listening.address);
  const failed = rep.results.filter((r) => r.status === 'fail' && !KNOWN_FAILURES.includes(r.id)).map(formatResult);
  assert.deepEqual(failed, [], `failed checks:\n${failed.join('\n')}\n\nall:\n${show(rep)}`);
  for (const r of rep.results.filter((x) => KNOWN_FAILURES.includes(x.id))) {
    console.log(r.status === 'fail' ? `known failure: ${formatResult(r)}` : `${r.id} now ${r.status}: remove it from KNOWN_FAILURES`);
  }
  assert.equal(rep.capabilities?.protocolVersion, 2);
  // the built-in engine lists every RPC, claims determinism and references and hosts LoRA models, so every
  // conditional check runs but lora.refused (for engines without capabilities.lora)
  assert.deepEqual(
    rep.results.filter((r) => r.status === 'skip').map((r) => r.id),
    ['health.unlisted-unimplemented', 'lora.refused'],
    show(rep),
  );
  assert.ok(rep.counts.pass >= 40, show(rep));
  console.log(`conformance: ${rep.counts.pass} passed, ${rep.counts.fail} failed, ${rep.counts.skip} skipped in ${Date.now() - t0} ms`);
});

test('`troupe engine-check <addr>` prints a line per check and the summary, exit 0; --json; a dead address is a clear error', async () => {
  const env = { ...process.env, TROUPE_DEBUG: '' };
  const only = ['health.', 'init.version0', 'generate.shape'];
  const r = await troupe(['engine-check', engine.listening.address, '--only', only.join(',')], env);
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /^PASS health\.serving: /m);
  assert.match(r.stdout, /^PASS generate\.shape: /m);
  assert.match(
    r.stdout,
    new RegExp(`^engine-check ${engine.listening.address}: \\d+ passed, 0 failed, \\d+ skipped \\(${selectChecks(only).length} checks, [\\d.]+ s\\)$`, 'm'),
  );

  const j = await troupe(['engine-check', engine.listening.address, '--json', '--only', 'health.serving'], env);
  assert.equal(j.code, 0, j.stderr);
  const rep = JSON.parse(j.stdout) as ConformanceReport;
  assert.deepEqual(rep.counts, { pass: 1, fail: 0, skip: 0 });
  assert.equal(rep.results[0]!.id, 'health.serving');

  const dead = await troupe(['engine-check', '127.0.0.1:1', '--only', 'health.serving'], env);
  assert.equal(dead.code, 1);
  assert.match(dead.stderr, /no engine answers at 127\.0\.0\.1:1/);
  assert.doesNotMatch(dead.stderr, /^\s+at /m, 'no stack trace');

  const typo = await troupe(['engine-check', engine.listening.address, '--only', 'nope'], env);
  assert.equal(typo.code, 1);
  assert.match(typo.stderr, /unknown check id\(s\): nope/);
});

test('`troupe engine-check` over the whole suite: exit 0 and the summary line', async () => {
  const skip = KNOWN_FAILURES.length ? ['--skip', KNOWN_FAILURES.join(',')] : [];
  const r = await troupe(['engine-check', engine.listening.address, ...skip], { ...process.env, TROUPE_DEBUG: '' });
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /^engine-check \S+: \d+ passed, 0 failed, \d+ skipped \(\d+ checks, [\d.]+ s\)$/m);
  for (const id of KNOWN_FAILURES) assert.match(r.stdout, new RegExp(`^SKIP ${id.replace('.', '\\.')}: skipped by request`, 'm'));
});

// ---------- negative control: a lying proxy ----------

function toStatus(e: WireError): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (e.reason) metadata.set(ERROR_REASON_METADATA, e.reason);
  return { code: e.code, details: e.message, metadata };
}

/** A server for the Engine service that forwards every call to `target`, passing each answer through `tamper`. */
async function lyingProxy(
  target: string,
  tamper: Record<string, (res: any) => any>,
  local: Record<string, (req: any) => unknown> = {},
): Promise<{ address: string; close: () => void }> {
  const upstream = new WireClient(target);
  const server = new grpc.Server({ 'grpc.max_receive_message_length': MAX_MESSAGE_BYTES, 'grpc.max_send_message_length': MAX_MESSAGE_BYTES });
  const handlers: grpc.UntypedServiceImplementation = {};
  const change = (name: string, x: unknown) => (tamper[name] ? tamper[name]!(x) : x);
  const answer = (cb: grpc.sendUnaryData<unknown>, name: string) => (o: Outcome<unknown>) => (o.ok ? cb(null, change(name, o.value)) : cb(toStatus(o.error)));
  for (const [name, m] of Object.entries(engineServiceDefinition()) as [RpcName, grpc.MethodDefinition<unknown, unknown>][]) {
    if (!m.requestStream && !m.responseStream) {
      // `local` answers a unary RPC here, without the engine ever seeing it
      handlers[name] = (call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) =>
        local[name] ? cb(null, local[name]!(call.request)) : void upstream.unary(name, call.request as Req<RpcName>).then(answer(cb, name));
    } else if (m.requestStream) {
      handlers[name] = (call: grpc.ServerReadableStream<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        const msgs: unknown[] = [];
        call.on('data', (d) => msgs.push(d));
        call.on('end', () => void upstream.clientStream(name, msgs as Req<RpcName>[]).then(answer(cb, name)));
      };
    } else {
      handlers[name] = (call: grpc.ServerWritableStream<unknown, unknown>) => {
        void upstream.serverStream(name, call.request as Req<RpcName>).then((o) => {
          for (const msg of o.messages) call.write(change(name, msg));
          if (o.ok) call.end();
          else call.emit('error', toStatus(o.error));
        });
      };
    }
  }
  server.addService(engineServiceDefinition(), handlers);
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  return {
    address: `127.0.0.1:${port}`,
    close: () => {
      server.forceShutdown();
      upstream.close();
    },
  };
}

test('negative control: Health claiming protocol_version 1 and Generate with a log-prob missing fail those checks', async () => {
  const proxy = await lyingProxy(engine.listening.address, {
    Health: (h: P.HealthResponse) => ({ ...h, capabilities: h.capabilities && { ...h.capabilities, protocolVersion: 1 } }),
    Generate: (g: P.GenerateResponse) => ({ ...g, sequences: g.sequences.map((s) => ({ ...s, logprobs: s.logprobs.slice(1) })) }),
  });
  try {
    const rep = await runConformance(proxy.address, { only: ['health.', 'init.version0', 'export.unary', 'generate.', 'score.shape'] });
    const status = Object.fromEntries(rep.results.map((r) => [r.id, r]));
    assert.equal(status['health.capabilities']!.status, 'fail', show(rep));
    assert.match(status['health.capabilities']!.detail, /protocol_version 1, expected 2/);
    for (const id of ['generate.shape', 'generate.max-tokens', 'generate.stop-token', 'generate.greedy', 'generate.deterministic']) {
      assert.equal(status[id]!.status, 'fail', `${id}:\n${show(rep)}`);
      assert.match(status[id]!.detail, /logprobs for \d+ tokens/, id);
    }
    // the rest of the engine is intact, and the suite says so
    for (const id of ['health.serving', 'init.version0', 'export.unary', 'score.shape']) assert.equal(status[id]!.status, 'pass', `${id}:\n${show(rep)}`);

    const r = await troupe(['engine-check', proxy.address, '--only', 'health.capabilities,generate.shape'], { ...process.env, TROUPE_DEBUG: '' });
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout, /^FAIL health\.capabilities: protocol_version 1, expected 2/m);
    assert.match(r.stdout, /^FAIL generate\.shape: /m);
    assert.match(r.stdout, /: 0 passed, 2 failed, 0 skipped/);
  } finally {
    proxy.close();
  }
});

test('negative control: an error without troupe-error-reason, and an RPC listed in capabilities but UNIMPLEMENTED', async () => {
  // Health as the real engine's (every RPC listed); Generate fails NOT_FOUND without the reason metadata; the rest is missing.
  const upstream = new WireClient(engine.listening.address);
  const server = new grpc.Server();
  server.addService(engineServiceDefinition(), {
    Health: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => void upstream.unary('Health', {}).then((o) => (o.ok ? cb(null, o.value) : cb(toStatus(o.error)))),
    Generate: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb({ code: grpc.status.NOT_FOUND, details: 'no such model' }),
  });
  const port = await new Promise<number>((res, rej) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
  );
  try {
    const rep = await runConformance(`127.0.0.1:${port}`, { only: ['errors.model-not-loaded', 'init.version0'] });
    const byId = Object.fromEntries(rep.results.map((r) => [r.id, r]));
    assert.equal(byId['errors.model-not-loaded']!.status, 'fail', show(rep));
    assert.match(byId['errors.model-not-loaded']!.detail, /got NOT_FOUND\/\(no troupe-error-reason\)/);
    assert.equal(byId['init.version0']!.status, 'fail', show(rep));
    assert.match(byId['init.version0']!.detail, /InitModel .*UNIMPLEMENTED/);
  } finally {
    server.forceShutdown();
    upstream.close();
  }
});

test("negative control: mutants of the real engine's answers fail the checks that should see them", async () => {
  const mutants: [string, Record<string, (x: any) => any>, string[], string[]][] = [
    [
      'sample_logprobs = logprobs',
      { Generate: (g: P.GenerateResponse) => ({ ...g, sequences: g.sequences.map((s) => ({ ...s, sampleLogprobs: s.logprobs })) }) },
      ['generate.'],
      ['generate.sampling', 'generate.sample-logprobs'],
    ],
    [
      'negative entropies',
      { Score: (r: P.ScoreResponse) => ({ ...r, sequences: r.sequences.map((s) => ({ ...s, entropy: s.entropy.map((h) => -h) })) }) },
      ['score.'],
      ['score.shape'],
    ],
    ['Abort counts 2', { Abort: () => ({ abortedRequests: 2 }) }, ['abort.unknown'], ['abort.unknown']],
    ['Update never replays', { Update: (r: P.UpdateResponse) => ({ ...r, replayed: false }) }, ['update.replay'], ['update.replay']],
  ];
  for (const [name, tamper, only, expected] of mutants) {
    const proxy = await lyingProxy(engine.listening.address, tamper);
    try {
      const rep = await runConformance(proxy.address, { only });
      const failed = rep.results.filter((r) => r.status === 'fail').map((r) => r.id);
      for (const id of expected) assert.ok(failed.includes(id), `${name}: ${id} should fail\n${show(rep)}`);
    } finally {
      proxy.close();
    }
  }
  // An Abort that never reaches the engine (answered "0 aborted" at once) is caught once the engine says the queued call it
  // named still waits (this proxy answers Health itself, during the first Generate, as a responsive engine would).
  {
    const client = new WireClient(engine.listening.address);
    const health = await client.unary('Health', {});
    client.close();
    assert.ok(health.ok);
    const waiting = { ...health.value, queueDepth: 2 };
    const proxy = await lyingProxy(engine.listening.address, {}, { Abort: () => ({ abortedRequests: 0 }), Health: () => waiting });
    try {
      const rep = await runConformance(proxy.address, { only: ['abort.generate'] });
      assert.equal(rep.results[0]!.status, 'fail', show(rep));
      assert.match(rep.results[0]!.detail, /did not find it/);
    } finally {
      proxy.close();
    }
  }
});

test('an engine that dies mid-suite: the remaining checks fail as not run, quickly', async () => {
  const spare = await spawnEngine(['--device', 'cpu', '--port', '0'], { quiet: true, command: BUILT_IN_ENGINE_COMMAND });
  const proxy = await lyingProxy(spare.listening.address, {
    ExportVersionChunks: (c: unknown) => {
      spare.child.kill('SIGKILL');
      return c;
    },
  });
  try {
    const t0 = Date.now();
    const rep = await runConformance(proxy.address, { only: ['health.serving', 'export.chunks', 'load.chunks', 'generate.shape'], connectTimeoutMs: 5000 });
    const byId = Object.fromEntries(rep.results.map((r) => [r.id, r]));
    assert.equal(byId['health.serving']!.status, 'pass', show(rep));
    assert.equal(byId['generate.shape']!.status, 'fail', show(rep));
    assert.match(byId['generate.shape']!.detail, /not run: the engine stopped answering Health after (export|load)\.chunks/);
    assert.ok(Date.now() - t0 < 30_000, `took ${Date.now() - t0} ms`);
  } finally {
    proxy.close();
    spare.child.kill('SIGKILL');
  }
});

test(
  'another engine (TROUPE_CONFORMANCE_ADDRESS) passes the suite',
  { skip: !process.env.TROUPE_CONFORMANCE_ADDRESS && 'set TROUPE_CONFORMANCE_ADDRESS=host:port to check another engine' },
  async () => {
    const skip = process.env.TROUPE_CONFORMANCE_SKIP?.split(',').filter(Boolean);
    const rep = await assertConformant(process.env.TROUPE_CONFORMANCE_ADDRESS!, { skip, log: (l) => console.log(l) });
    console.log(`${process.env.TROUPE_CONFORMANCE_ADDRESS}: ${rep.counts.pass} passed, ${rep.counts.skip} skipped`);
  },
);
