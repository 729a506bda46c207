// troupe stop <run>: the run finishes its current step, runs a final eval and completes as "stopped".
import { TroupeError } from '../../infra/errors';
import { stopSignal } from '../../workflows/definitions';
import { defineCommand } from '../command';
import { requireOpenRun } from '../../control/open-run';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'stop',
  summary: 'Stop a running or paused run after its current step (with a final eval)',
  usage: 'troupe stop <run>',
  description:
    'Sends the run\'s `stop` signal: it finishes the step in flight, runs a final eval and closes as\n"stopped", keeping every committed version. A stopped run cannot be resumed.',
  positionals: true,
  async run({ positionals, log }) {
    const runId = positionals[0];
    if (!runId || positionals.length > 1) throw new TroupeError('stop: name one run', 'list runs with `npx troupe list`');
    const c = await connectRuns(log);
    try {
      const open = await requireOpenRun(c, runId, 'stop');
      await open.handle.signal(stopSignal);
      console.log(
        `run ${runId}: stop sent at step ${open.view.step}/${open.view.steps}; it stops after the step in flight and a final eval (watch it: npx troupe status ${runId} --watch)`,
      );
      return 0;
    } finally {
      await c.close();
    }
  },
});
