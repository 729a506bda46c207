#!/usr/bin/env node
'use strict';
// `npm test` — plain JavaScript, no dependencies at load time:
//   1. installs packages if node_modules is missing or stale, generates the engine protocol's
//      types and builds the dashboard's page if they are (stack/install.js, as cli/bin.js does);
//   2. for integration tests: makes sure the Temporal CLI exists (the users' code path:
//      TROUPE_TEMPORAL_BIN → PATH → cache → go install), and picks the test PostgreSQL server
//      (TROUPE_TEST_DATABASE_URL → postgres://postgres@127.0.0.1:5432/postgres → embedded);
//   3. with no arguments, checks types (tsc) and lints (tools/lint.js) before any test runs;
//   4. sweeps what killed earlier runs left (tools/test-runs.ts) and claims a folder for this run;
//   5. runs `node --import tsx --import ./test/helpers/enter-project.mjs --test` (unit files two at a time)
//      (every test process enters the checkout's project: examples/) over test/unit/**/*.test.ts, then
//      over test/integration/**/*.test.ts, and ends with one line "N passed, N failed".
// Arguments filter the files by substring of their path: `npm test -- unit`, `npm test -- foundation ping`.
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { ensurePackages, ensureProtocolTypes, ensureDashboardBuild } = require('../stack/install.js');

const repoRoot = path.resolve(__dirname, '..');
const log = (line) => process.stderr.write(line + '\n');

function findTests(dir) {
  const abs = path.join(repoRoot, dir);
  if (!fs.existsSync(abs)) return [];
  const out = [];
  const walk = (d) => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.isFile() && entry.name.endsWith('.test.ts')) out.push(path.relative(repoRoot, p));
    }
  };
  walk(abs);
  return out.sort();
}

async function main() {
  const filters = process.argv.slice(2);
  ensurePackages(repoRoot, log);
  ensureProtocolTypes(repoRoot, log);
  ensureDashboardBuild(repoRoot, log);

  const all = [...findTests('test/unit'), ...findTests('test/integration')];
  const files = filters.length ? all.filter((f) => filters.some((x) => f.includes(x))) : all;
  if (files.length === 0) {
    log(`troupe test: no test files match ${filters.map((f) => JSON.stringify(f)).join(', ') || '(none found)'}`);
    log(`  → files are test/unit/**/*.test.ts and test/integration/**/*.test.ts; filters match substrings of their paths`);
    return 1;
  }

  // tsx runs TypeScript without checking types, so the whole suite starts with the type check,
  // then the lint (layers, cycles, floating promises, ...).
  if (filters.length === 0) {
    // Four projects: the Node code (tsconfig.json), the tests (test/tsconfig.json), the examples
    // project (as a project's teams are checked) and the dashboard's browser page (DOM types).
    log('troupe test: type check (tsc --noEmit: tsconfig.json, test, examples, dashboard/web)');
    const tscOk = ['.', 'test', 'examples', 'dashboard/web'].every(
      (p) =>
        require('node:child_process').spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '--noEmit', '-p', path.join(repoRoot, p)], {
          cwd: repoRoot,
          stdio: 'inherit',
        }).status === 0,
    );
    if (!tscOk) {
      log('troupe test: the type check failed (errors above); no tests were run');
      console.log('0 passed, 1 failed');
      return 1;
    }
    log('troupe test: lint (npm run lint)');
    if (!require('./lint.js').lint()) {
      log('troupe test: the lint failed (errors above); no tests were run');
      console.log('0 passed, 1 failed');
      return 1;
    }
  }

  require('tsx/cjs');
  const { formatError } = require('../infra/errors.ts');
  // Stacks of earlier runs that were killed (their owner is dead) go first; this run's own
  // processes and temp folders are marked as its, in a folder swept at its end.
  const { claimTestRun, sweepStaleTestRuns, testRunEnv } = require('./test-runs.ts');
  const { endMarkedProcesses } = require('../stack/processes.ts');
  for (const { dir, ended } of await sweepStaleTestRuns().catch((e) => (log(`troupe test: sweeping stale test runs: ${e.message}`), [])))
    log(
      `troupe test: swept a killed run's leftovers: ${dir}${ended.length ? ` (ended ${ended.map((p) => `${p.pid} ${path.basename(p.argv[0] || '?')}`).join(', ')})` : ''}`,
    );
  const runDir = claimTestRun();
  const env = testRunEnv(runDir);
  let stopDatabase;
  try {
    if (files.some((f) => f.startsWith('test/integration/'))) {
      if (env.TEMPORAL_ADDRESS) {
        log(`troupe test: Temporal: TEMPORAL_ADDRESS=${env.TEMPORAL_ADDRESS}`);
      } else {
        const { ensureTemporalBinary } = require('../stack/temporal.ts');
        const bin = await ensureTemporalBinary({ log });
        env.TROUPE_TEMPORAL_BIN = bin.path;
        log(`troupe test: Temporal CLI: ${bin.path} (from ${bin.source})`);
      }
      const { resolveTestDatabaseServer, dropStaleTestDatabases } = require('../testing/test-database.ts');
      const { redactUrl } = require('../infra/config.ts');
      const db = await resolveTestDatabaseServer({ log });
      env.TROUPE_TEST_DATABASE_URL = db.url;
      stopDatabase = db.stop;
      log(`troupe test: PostgreSQL: ${redactUrl(db.url)} (${db.source}, server ${db.serverVersion})`);
      const stale = await dropStaleTestDatabases(db.url).catch(() => []);
      if (stale.length) log(`troupe test: dropped ${stale.length} stale test database(s)`);
    }
  } catch (err) {
    log(formatError(err, { debug: process.env.TROUPE_DEBUG === '1' }));
    fs.rmSync(runDir, { recursive: true, force: true });
    return 1;
  }

  // Node's runner sorts the files it is given, so unit and integration run as two passes.
  // Each pass also writes TAP to a temp file, read back for the closing totals line.
  const reporter = process.stdout.isTTY ? 'spec' : 'tap';
  const tapDir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'troupe-test-'));
  const totals = { passed: 0, failed: 0, skipped: 0 };
  const summary = [];
  let code = 0;
  for (const kind of ['unit', 'integration']) {
    const group = files.filter((f) => f.startsWith(`test/${kind}/`));
    if (group.length === 0) continue;
    log(`troupe test: ${kind}: ${group.length} file(s)`);
    const tapFile = path.join(tapDir, `${kind}.tap`);
    const args = [
      '--import',
      'tsx',
      '--import',
      './test/helpers/enter-project.mjs',
      '--test',
      // Unit files two at a time: most of a unit file's time is tsx loading it, and they share
      // nothing (each test database and port is its own); integration files one at a time.
      `--test-concurrency=${kind === 'unit' ? 2 : 1}`,
      // 20 min per test file; TROUPE_TEST_TIMEOUT_S lifts it for the long opt-in tests (a 10,000-episode durable step)
      `--test-timeout=${Number(process.env.TROUPE_TEST_TIMEOUT_S || 1200) * 1000}`,
      `--test-reporter=${reporter}`,
      '--test-reporter-destination=stdout',
      '--test-reporter=tap',
      `--test-reporter-destination=${tapFile}`,
      ...group,
    ];
    const c = await new Promise((resolve) => {
      const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: 'inherit' });
      const forward = (sig) => child.kill(sig);
      process.on('SIGINT', forward);
      process.on('SIGTERM', forward);
      child.on('close', (exit, sig) => {
        process.off('SIGINT', forward);
        process.off('SIGTERM', forward);
        resolve(exit ?? (sig ? 1 : 0));
      });
    });
    const tap = fs.existsSync(tapFile) ? fs.readFileSync(tapFile, 'utf8') : '';
    const count = (name) => Number((new RegExp(`^# ${name} (\\d+)$`, 'm').exec(tap) || [])[1] || 0);
    const passed = count('pass');
    const failed = count('fail') + count('cancelled') + (c !== 0 && count('fail') + count('cancelled') === 0 ? 1 : 0);
    const skipped = count('skipped') + count('todo');
    totals.passed += passed;
    totals.failed += failed;
    totals.skipped += skipped;
    summary.push(`${kind} ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
    if (c !== 0) code = c;
  }
  fs.rmSync(tapDir, { recursive: true, force: true });
  log(`troupe test: ${summary.join('; ')}`);
  console.log(`${totals.passed} passed, ${totals.failed} failed${totals.skipped ? `, ${totals.skipped} skipped` : ''}`);
  if (stopDatabase) await stopDatabase().catch(() => undefined);
  const left = await endMarkedProcesses(runDir).catch(() => []);
  if (left.length) log(`troupe test: ended ${left.length} process(es) the tests left running: ${left.map((p) => `${p.pid} ${p.service}`).join(', ')}`);
  fs.rmSync(runDir, { recursive: true, force: true });
  return code;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`troupe test: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  },
);
