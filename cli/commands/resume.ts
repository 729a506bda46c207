// troupe resume <run>: continue a paused run, or a failed, terminated or timed-out one from its last committed step.
import { episodeProblems } from '../../activities/store/trajectories';
import { loadConfig } from '../../infra/config';
import { TroupeError } from '../../infra/errors';
import { resumeSignal } from '../../workflows/definitions';
import { defineCommand } from '../command';
import { openRun } from '../../control/open-run';
import { connectRuns, resumeRun, watchRun } from '../../control/runs';
import { isPipeline, resumePipeline, watchToEnd } from '../../control/pipelines';
import { getRun } from '../../activities/store/runs';
import { runExitCode, summaryJson, summaryLines } from '../summary';
import { upWithCurrentTeams } from '../teams';

export default defineCommand({
  name: 'resume',
  summary: 'Continue a paused run, or one that failed, was terminated or timed out',
  usage: 'troupe resume <run | pipeline> [--json] [--detach]',
  description: [
    'One command for both ways a run can be held up:',
    '- a paused run (`troupe pause`, or the dashboard): sends its `resume` signal; it goes on at the',
    '  next step. A run still running gets the signal too, which cancels a pause not yet taken effect.',
    '- a failed, terminated or timed-out run: starts a new execution of its workflow (same workflow',
    '  id, same stored config) that picks up the versions and steps already committed in Postgres,',
    "  so no update is lost or repeated; it is recorded in the run's lineage (run_executions).",
    'A completed or stopped run cannot be resumed: start a new one with `troupe train`.',
    'A pipeline (troupe pipeline) that failed or was terminated starts again under its id: its ended',
    'stages are kept and the unfinished one resumes at its last committed step.',
    'Then it watches the run like `troupe train` (exit status 0 only when it completes and trained).',
  ].join('\n'),
  positionals: true,
  options: {
    json: { type: 'boolean', description: 'print the summary as one JSON object on the last line of stdout' },
    detach: { type: 'boolean', description: 'resume and return at once' },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId || positionals.length > 1) throw new TroupeError('resume: name one run', 'list runs with `npx troupe list`');
    const started = Date.now();
    await upWithCurrentTeams(loadConfig(), log);
    const c = await connectRuns(log);
    try {
      if (!(await getRun(c.sql, runId)) && (await isPipeline(c, runId))) {
        const handle = await resumePipeline(c, runId);
        log(`troupe: resumed pipeline ${runId} (new execution ${handle.firstExecutionRunId})`);
        return values.detach ? 0 : await watchToEnd(handle, log, values.json === true);
      }
      const open = await openRun(c, runId);
      let handle;
      if (open) {
        await open.handle.signal(resumeSignal);
        log(
          open.view.status === 'paused'
            ? `troupe: resumed paused run ${runId} at step ${open.view.step}/${open.view.steps}`
            : `troupe: run ${runId} is ${open.view.status}, not paused; sent resume, which cancels a pause not yet taken effect`,
        );
        handle = open.handle;
      } else {
        handle = await resumeRun(c.client, c.sql, c.config.taskQueue, runId);
        log(`troupe: resumed run ${runId} (new execution ${handle.firstExecutionRunId})`);
      }
      if (values.detach) return 0;
      const resumed = Date.now();
      const summary = await watchRun(handle);
      const times = { runSeconds: (Date.now() - resumed) / 1000, setupSeconds: (resumed - started) / 1000 };
      const problems = await episodeProblems(c.sql, runId);
      for (const l of summaryLines(summary, times, problems)) console.log(l);
      if (values.json) console.log(JSON.stringify(summaryJson(summary, times, problems)));
      return runExitCode(summary);
    } finally {
      await c.close();
    }
  },
});
