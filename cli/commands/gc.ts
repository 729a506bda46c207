// troupe gc: prunes the bytes of model versions the retention policy does not keep
// (activities/store/retention.ts), then checkpoint files no version names, then the gateway
// journals of runs that completed or were stopped; with an episode window, the training episodes
// outside it (activities/store/episode-retention.ts).
import {
  describeEpisodePolicy,
  describeWorkingState,
  planEpisodePrune,
  plannedTurns,
  pruneEpisodes,
  validateEpisodePolicy,
} from '../../activities/store/episode-retention';
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
  summary: 'Remove model versions no run needs (keeps latest, every Nth, resume and eval points), and old training episodes',
  usage:
    'troupe gc [--run ID] [--keep-every N] [--keep-last N] [--orphan-grace-minutes M] [--episodes-keep-days D] [--episodes-keep-steps N] [--episodes-sample F] [--dry-run]',
  description:
    "Per model of each run keeps version 0, the newest --keep-last, every --keep-every-th, the versions evals used, and everything from the run's resume point on; " +
    'the others lose their bytes (inline or files) and keep their row (step, sha256, metrics). Then removes checkpoint files no version names, older than the grace period, ' +
    'and the gateway journal (gateway_calls) of each run that completed or was stopped (a failed one can resume, and its journal answers its retried calls). ' +
    'With any --episodes-* flag it also deletes the training episodes (turns, tool calls, rewards, journal) outside the window: ' +
    "it keeps every eval episode, every episode from the run's resume point on, those of the last --episodes-keep-days days or --episodes-keep-steps steps, " +
    'and a --episodes-sample fraction of the rest chosen by a hash of the episode id; the run page says how many went.',
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
    'episodes-keep-days': { type: 'number', valueName: 'D', example: '7', description: 'keep training episodes younger than D days (prune the older ones)' },
    'episodes-keep-steps': {
      type: 'number',
      valueName: 'N',
      example: '10',
      description: "keep the training episodes of each run's newest N steps (prune the older ones)",
    },
    'episodes-sample': {
      type: 'number',
      valueName: 'F',
      example: '0.05',
      description: 'of the training episodes outside the window keep this fraction, chosen by a hash of the episode id (default 0)',
    },
    'dry-run': { type: 'boolean', description: 'print what would be removed, remove nothing' },
  },
  async run({ values, log }) {
    const policy = validatePolicy({ keepEvery: values['keep-every'] ?? 10, keepLast: values['keep-last'] ?? 2 });
    const graceMinutes = values['orphan-grace-minutes'] ?? 60;
    if (!(graceMinutes >= 0)) throw new TroupeError(`--orphan-grace-minutes: must be >= 0 (got ${graceMinutes})`);
    const pruneEpisodeRows = [values['episodes-keep-days'], values['episodes-keep-steps'], values['episodes-sample']].some((v) => v !== undefined);
    const episodePolicy = validateEpisodePolicy(
      { keepDays: values['episodes-keep-days'], keepSteps: values['episodes-keep-steps'], sample: values['episodes-sample'] ?? 0 },
      { keepDays: '--episodes-keep-days', keepSteps: '--episodes-keep-steps', sample: '--episodes-sample' },
    );
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
      let episodes = 0;
      let turns = 0;
      // before the journals of ended runs, so each pruned episode's journaled calls are counted with it
      if (pruneEpisodeRows) {
        for (const plan of await planEpisodePrune(sql, episodePolicy, { runId: values.run })) {
          const steps = `steps ${plan.episodes[0]?.step ?? 0}-${plan.episodes.at(-1)?.step ?? 0}`;
          if (values['dry-run']) {
            const t = await plannedTurns(sql, plan);
            console.log(
              `would prune ${plan.episodes.length} training episode(s) of ${plan.runId} (${t} turn(s), ${steps})${describeWorkingState(plan, 'would delete')}`,
            );
            episodes += plan.episodes.length;
            turns += t;
          } else {
            const done = await pruneEpisodes(sql, plan, episodePolicy);
            console.log(
              `pruned ${done.episodes} training episode(s) of ${plan.runId} (${done.turns} turn(s), ${done.gatewayCalls} journaled call(s), ${steps})${describeWorkingState(done)}`,
            );
            episodes += done.episodes;
            turns += done.turns;
          }
        }
      }
      const journals = await planJournalPrune(sql, values.run);
      if (!values['dry-run']) await pruneJournals(sql, journals);
      for (const j of journals) console.log(`${values['dry-run'] ? 'would delete' : 'deleted'} the gateway journal of ${j.runId} (${j.calls} call(s))`);
      log(
        `troupe gc: ${verb} ${prune.length} version(s), ${mib(prune.reduce((s, v) => s + v.bytes, 0))}; ${orphans.length} unnamed file(s); ` +
          `${journals.reduce((n, j) => n + j.calls, 0)} journaled gateway call(s) of ${journals.length} ended run(s)` +
          (pruneEpisodeRows ? `; ${episodes} training episode(s) with ${turns} turn(s) (${describeEpisodePolicy(episodePolicy)})` : '') +
          (values['dry-run'] ? ' (dry run)' : ''),
      );
      return 0;
    } finally {
      await sql.end({ timeout: 2 });
    }
  },
});
