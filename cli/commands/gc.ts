// troupe gc: prunes the bytes of model versions the retention policy does not keep
// (activities/store/retention.ts), then checkpoint files no version names, then the gateway
// journals of runs that completed or were stopped.
import { planPrune, pruneVersions, orphanFiles, validatePolicy, planJournalPrune, pruneJournals } from '../../activities/store/retention';
import { checkpointStoreOf } from '../../infra/checkpoint-store';
import { loadConfig } from '../../infra/config';
import { connect } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { ensureDatabase } from '../../stack/postgres';
import { defineCommand } from '../command';

const mib = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

export default defineCommand({
  name: 'gc',
  summary: 'Remove model versions no run needs (keeps latest, every Nth, resume and eval points)',
  usage: 'troupe gc [--run ID] [--keep-every N] [--keep-last N] [--orphan-grace-minutes M] [--dry-run]',
  description:
    "Per model of each run keeps version 0, the newest --keep-last, every --keep-every-th, the versions evals used, and everything from the run's resume point on; " +
    'the others lose their bytes (inline or files) and keep their row (step, sha256, metrics). Then removes checkpoint files no version names, older than the grace period, ' +
    'and the gateway journal (gateway_calls) of each run that completed or was stopped (a failed one can resume, and its journal answers its retried calls).',
  options: {
    run: { type: 'string', valueName: 'ID', description: 'only this run (default: every run)' },
    'keep-every': { type: 'number', valueName: 'N', default: '10', example: '10', description: 'keep versions whose number is a multiple of N (default 10)' },
    'keep-last': { type: 'number', valueName: 'N', default: '2', example: '2', description: 'keep the N newest versions of each model (default 2)' },
    'orphan-grace-minutes': {
      type: 'number',
      valueName: 'M',
      default: '60',
      example: '60',
      description: 'only remove unnamed files older than this (a newer one may belong to a commit in progress; default 60)',
    },
    'dry-run': { type: 'boolean', description: 'print what would be removed, remove nothing' },
  },
  async run({ values, log }) {
    const policy = validatePolicy({ keepEvery: values['keep-every'] ?? 10, keepLast: values['keep-last'] ?? 2 });
    const graceMinutes = values['orphan-grace-minutes'] ?? 60;
    if (!(graceMinutes >= 0)) throw new TroupeError(`--orphan-grace-minutes: must be >= 0 (got ${graceMinutes})`);
    const config = loadConfig();
    const store = checkpointStoreOf(config);
    const sql = connect((await ensureDatabase(config, log)).url, { max: 2 });
    try {
      const prune = await planPrune(sql, policy, values.run);
      const verb = values['dry-run'] ? 'would prune' : 'pruned';
      if (!values['dry-run']) await pruneVersions(sql, store, prune);
      for (const v of prune) console.log(`${verb} ${v.runId} ${v.model} v${v.version} (${mib(v.bytes)})`);
      const orphans = await orphanFiles(sql, store, graceMinutes * 60_000);
      if (!values['dry-run']) for (const f of orphans) await store.remove(f);
      for (const f of orphans) console.log(`${values['dry-run'] ? 'would remove' : 'removed'} unnamed file ${store.absolute(f)}`);
      const journals = await planJournalPrune(sql, values.run);
      if (!values['dry-run']) await pruneJournals(sql, journals);
      for (const j of journals) console.log(`${values['dry-run'] ? 'would delete' : 'deleted'} the gateway journal of ${j.runId} (${j.calls} call(s))`);
      log(
        `troupe gc: ${verb} ${prune.length} version(s), ${mib(prune.reduce((s, v) => s + v.bytes, 0))}; ${orphans.length} unnamed file(s); ` +
          `${journals.reduce((n, j) => n + j.calls, 0)} journaled gateway call(s) of ${journals.length} ended run(s)${values['dry-run'] ? ' (dry run)' : ''}`,
      );
      return 0;
    } finally {
      await sql.end({ timeout: 2 });
    }
  },
});
