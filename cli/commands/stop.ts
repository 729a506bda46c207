// troupe stop <run> [--now]: the run finishes its current step (or, --now, cancels it), then closes as "stopped".
import { TroupeError } from '../../infra/errors';
import { stopSignal } from '../../workflows/definitions';
import { defineCommand } from '../command';
import { requireOpenRun } from '../../control/open-run';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'stop',
  summary: 'Stop a running or paused run after its current step (with a final eval), or --now',
  usage: 'troupe stop <run> [--now]',
  description:
    'Sends the run\'s `stop` signal: it finishes the step in flight, runs a final eval and closes as\n"stopped", keeping every committed version. With --now it cancels the step in flight instead (its\nepisodes end at once; an update already committed stays) and skips the final eval. A stopped run\ncannot be resumed.',
  positionals: true,
  options: { now: { type: 'boolean', description: 'cancel the step in flight and skip the final eval' } },
  async run({ positionals, values, log }) {
    const runId = positionals[0];
    if (!runId || positionals.length > 1) throw new TroupeError('stop: name one run', 'list runs with `npx troupe list`');
    const c = await connectRuns(log);
    try {
      const open = await requireOpenRun(c, runId, 'stop');
      const now = values.now === true;
      await open.handle.signal(stopSignal, { now });
      console.log(
        `run ${runId}: stop${now ? ' --now' : ''} sent at step ${open.view.step}/${open.view.steps}; it stops ${now ? 'now, cancelling the step in flight' : 'after the step in flight and a final eval'} (watch it: npx troupe status ${runId} --watch)`,
      );
      return 0;
    } finally {
      await c.close();
    }
  },
});
