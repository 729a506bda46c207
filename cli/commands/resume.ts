// troupe resume <run>: continue a failed, terminated or timed-out run from its last committed step.
import { loadConfig } from '../../infra/config';
import { TroupeError } from '../../infra/errors';
import { defineCommand } from '../command';
import { connectRuns, resumeRun, summaryJson, summaryLines, watchRun } from '../runs';
import { upWithCurrentTeams } from '../teams';

export default defineCommand({
  name: 'resume',
  summary: 'Continue a run that failed, was terminated or timed out, from its last committed step',
  usage: 'troupe resume <run> [--json] [--detach]',
  description: [
    'Starts a new execution of the run\'s workflow (same workflow id, same stored config). It picks up',
    'the versions and steps already committed in Postgres, so no update is lost or repeated; the',
    'new execution is recorded in the run\'s lineage (run_executions).',
  ].join('\n'),
  positionals: true,
  options: {
    json: { type: 'boolean', description: 'print the summary as one JSON object on the last line of stdout' },
    detach: { type: 'boolean', description: 'start and return at once' },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId) throw new TroupeError('resume: name a run', 'list runs with `npx troupe list`');
    const started = Date.now();
    await upWithCurrentTeams(loadConfig(), log);
    const c = await connectRuns(log);
    try {
      const next = await resumeRun(c.client, c.sql, c.config.taskQueue, runId);
      log(`troupe: resumed run ${runId} (new execution ${next.firstExecutionRunId})`);
      if (values.detach) return 0;
      const summary = await watchRun(next);
      const wallSeconds = (Date.now() - started) / 1000;
      for (const l of summaryLines(summary, wallSeconds)) console.log(l);
      if (values.json) console.log(JSON.stringify(summaryJson(summary, wallSeconds)));
      return 0;
    } finally {
      await c.close();
    }
  },
});
