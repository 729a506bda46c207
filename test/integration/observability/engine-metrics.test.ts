/**
 * Each engine serves its own Prometheus `/metrics` (--metrics-port, or TROUPE_ENGINE_METRICS_PORT):
 * the built-in ONNX engine and the PyTorch engine, as processes, take a few real requests (InitModel,
 * Generate, Score, Update, one Generate of a model not loaded); the scrape then shows them counted
 * by RPC and status, the tokens generated and trained equal to what the responses say, the model's
 * versions, device runs and resident memory; `promtool check metrics` (Debian's Prometheus) passes
 * on both, both serve the same metric names, and a real Prometheus (Debian's) scrapes them. A bad or
 * taken --metrics-port fails start-up naming the flag.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { EngineClient } from '../../../engines/protocol/client';
import { spawnEngine, type SpawnedEngine } from '../../../gpu-workers/engine-process';
import { BUILT_IN_ENGINE_COMMAND } from '../../../processes/engine-kinds';
import { pytorchEngine } from '../../../stack/pytorch-engine';
import { freePort } from '../../helpers';

const run = promisify(execFile);
const hasPromtool = spawnSync('promtool', ['--version']).status === 0;
const hasPrometheus = spawnSync('prometheus', ['--version']).status === 0;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const V = 64;
const SPEC = { family: 'transformer', vocabSize: V, width: 32, layers: 2, heads: 4, maxSeq: 64 };

/** Samples of a scrape as "name{labels}" -> value (labels as served, in order). */
function parse(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

function promtool(text: string): void {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.status, 0, `promtool check metrics: ${r.stdout}${r.stderr}`);
}

const engines: { name: string; command: () => readonly string[] | string }[] = [
  { name: 'the built-in ONNX engine', command: () => BUILT_IN_ENGINE_COMMAND },
  {
    name: 'the PyTorch engine',
    command: () => {
      const e = pytorchEngine();
      return 'missing' in e ? e.missing : e.command;
    },
  },
];
const served: Record<string, string[]> = {};
/** metrics port of each engine that ran, kept running for the Prometheus scrape */
const metricsPorts: Record<string, number> = {};
const procs: SpawnedEngine[] = [];
let prometheus: ChildProcess | undefined;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-engine-prom-'));
after(() => {
  procs.forEach((p) => p.child.kill('SIGTERM'));
  prometheus?.kill('SIGTERM');
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('engines serve Prometheus /metrics', { skip: hasPromtool ? false : 'promtool is not installed (Debian: apt-get install prometheus)' }, () => {
  for (const { name, command } of engines) {
    it(`${name}: requests, tokens, versions and memory, valid for promtool`, async (t) => {
      const cmd = command();
      if (typeof cmd === 'string') return t.skip(cmd);
      const port = await freePort();
      // the ONNX engine takes its port from the environment (as a pool worker's engine would), the PyTorch one from the flag
      const viaEnv = name.includes('ONNX');
      const saved = process.env.TROUPE_ENGINE_METRICS_PORT;
      if (viaEnv) process.env.TROUPE_ENGINE_METRICS_PORT = String(port);
      let proc: SpawnedEngine;
      try {
        proc = await spawnEngine(['--device', 'cpu', '--port', '0', ...(viaEnv ? [] : ['--metrics-port', String(port)])], {
          quiet: true,
          command: cmd,
          startTimeoutMs: 180_000,
        });
      } finally {
        if (saved === undefined) delete process.env.TROUPE_ENGINE_METRICS_PORT;
        else process.env.TROUPE_ENGINE_METRICS_PORT = saved;
      }
      procs.push(proc);
      assert.equal(proc.listening.metrics_address, `127.0.0.1:${port}`, 'the listening line says where /metrics is');
      const client = await EngineClient.connect(proc.listening.address);
      try {
        await client.initModel({ modelKey: 'm', spec: SPEC, seed: 3 });
        const gen = await client.generate({
          modelKey: 'm',
          version: 0,
          sequences: [1, 2].map((i) => ({ context: [i, 5, 9], seed: String(i) })),
          sampling: { temperature: 1, maxTokens: 4 },
        });
        const generated = gen.sequences.reduce((n, s) => n + s.tokens.length, 0);
        await client.score({ modelKey: 'm', version: 0, sequences: [{ context: [1], tokens: [2, 3] }] });
        const toks = [4, 7, 11];
        const upd = await client.update({
          modelKey: 'm',
          baseVersion: 0,
          requestId: 'u1',
          samples: [
            {
              context: [1, 2],
              tokens: toks,
              lossMask: [1, 1, 0],
              advantages: [1, 1, 1],
              oldLogprobs: toks.map(() => -Math.log(V)),
              lossWeights: [0.5, 0.5, 0.5],
            },
          ],
        });
        await assert.rejects(client.generate({ modelKey: 'nope', version: 0, sequences: [{ context: [1], seed: '1' }], sampling: { maxTokens: 2 } }));

        const res = await fetch(`http://127.0.0.1:${port}/metrics`);
        assert.equal(res.status, 200);
        assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
        const text = await res.text();
        promtool(text);
        const m = parse(text);
        const want: [string, number][] = [
          ['troupe_engine_requests_total{rpc="InitModel",code="OK"}', 1],
          ['troupe_engine_requests_total{rpc="Generate",code="OK"}', 1],
          ['troupe_engine_requests_total{rpc="Generate",code="NOT_FOUND"}', 1],
          ['troupe_engine_requests_total{rpc="Score",code="OK"}', 1],
          ['troupe_engine_requests_total{rpc="Update",code="OK"}', 1],
          ['troupe_engine_tokens_generated_total', generated],
          ['troupe_engine_tokens_trained_total', upd.tokens],
          ['troupe_engine_update_runs_total', 1],
          ['troupe_engine_score_runs_total', 1],
          ['troupe_engine_queue_depth', 0],
          ['troupe_engine_model_versions{model="m"}', 2],
          ['troupe_engine_model_latest_version{model="m"}', 1],
        ];
        for (const [k, v] of want) assert.equal(m.get(k), v, `${k} in\n${text}`);
        assert.equal(upd.tokens, 2, 'two tokens have loss_mask 1');
        assert.ok(generated > 0);
        assert.ok(m.get('troupe_engine_device_runs_total')! > 0, text);
        assert.ok(m.get('troupe_engine_generate_batches_total')! >= 1, text);
        assert.ok(m.get('troupe_engine_resident_memory_bytes')! > 10 * 2 ** 20, text);
        assert.ok(m.get('troupe_engine_uptime_seconds')! > 0, text);
        metricsPorts[name.includes('ONNX') ? 'onnx' : 'pytorch'] = port;
        served[name] = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((x) => `${x[1]} ${x[2]}`).sort();

        const missing = await fetch(`http://127.0.0.1:${port}/other`);
        assert.equal(missing.status, 404);
      } finally {
        client.close();
      }

      // a bad port names the flag
      await assert.rejects(
        run(cmd[0]!, [...cmd.slice(1), '--port', '0', '--metrics-port', 'lots'], { timeout: 120_000 }),
        (e: { code: number; stderr: string }) => {
          assert.equal(e.code, 1);
          assert.match(e.stderr, /--metrics-port/);
          return true;
        },
      );
      // a port in use is a start-up error naming the flag, not a silent engine without metrics
      await assert.rejects(
        run(cmd[0]!, [...cmd.slice(1), '--port', '0', '--metrics-port', String(port)], { timeout: 120_000 }),
        (e: { code: number; stderr: string }) => {
          assert.equal(e.code, 1);
          assert.match(e.stderr, new RegExp(`--metrics-port ${port}: cannot listen on 127\\.0\\.0\\.1:${port}`));
          return true;
        },
      );
    });
  }

  it('a real Prometheus scrapes the engines', { skip: hasPrometheus ? false : 'prometheus is not installed' }, async (t) => {
    const jobs = Object.entries(metricsPorts);
    if (!jobs.length) return t.skip('no engine ran here');
    const port = await freePort();
    const config = [
      'global: { scrape_interval: 1s }',
      'scrape_configs:',
      ...jobs.map(([job, p]) => `  - { job_name: troupe-engine-${job}, static_configs: [{ targets: ['127.0.0.1:${p}'] }] }`),
    ].join('\n');
    fs.writeFileSync(path.join(tmp, 'prometheus.yml'), config);
    const log = fs.openSync(path.join(tmp, 'prometheus.log'), 'w');
    prometheus = spawn(
      'prometheus',
      [`--config.file=${path.join(tmp, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(tmp, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
      { stdio: ['ignore', log, log] },
    );
    const q = 'troupe_engine_requests_total{rpc="Generate",code="OK"}';
    const deadline = Date.now() + 60_000;
    let got: { metric: Record<string, string>; value: [number, string] }[] = [];
    while (got.length < jobs.length) {
      assert.ok(Date.now() < deadline, `Prometheus never scraped every engine (${JSON.stringify(got)}; log in ${tmp})`);
      await sleep(1000);
      const r = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(q)}`).catch(() => undefined);
      if (r?.ok) got = ((await r.json()) as { data: { result: typeof got } }).data.result;
    }
    assert.deepEqual(got.map((x) => x.metric.job).sort(), jobs.map(([job]) => `troupe-engine-${job}`).sort());
    for (const x of got) assert.equal(x.value[1], '1', `${x.metric.job}: one Generate answered OK`);
  });

  it('both engines serve the same names and types', (t) => {
    const names = Object.values(served);
    if (names.length < 2) return t.skip('one of the engines did not run here');
    assert.deepEqual(names[0], names[1]);
  });
});
