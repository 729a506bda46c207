// troupe pause <run>: the run finishes its current step, then waits (resume it with `troupe resume`).
import { TroupeError } from '../../infra/errors';
import { pauseSignal } from '../../workflows/definitions';
import { defineCommand } from '../command';
import { requireOpenRun } from '../../control/open-run';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'pause',
  summary: 'Pause a running run after its current step',
  usage: 'troupe pause <run>',
  description:
    "Sends the run's `pause` signal: it finishes the step in flight, then waits with its models loaded.\nContinue it with `troupe resume <run>`; `troupe stop <run>` ends it (with a final eval).",
  positionals: true,
  async run({ positionals, log }) {
    const runId = positionals[0];
    if (!runId || positionals.length > 1) throw new TroupeError('pause: name one run', 'list runs with `npx troupe list`');
    const c = await connectRuns(log);
    try {
      const open = await requireOpenRun(c, runId, 'pause');
      if (open.view.status === 'paused') {
        console.log(`run ${runId} is already paused at step ${open.view.step}/${open.view.steps}`);
        return 0;
      }
      await open.handle.signal(pauseSignal);
      console.log(`run ${runId}: pause sent; it pauses after step ${open.view.step + 1}/${open.view.steps} (continue it with: npx troupe resume ${runId})`);
      return 0;
    } finally {
      await c.close();
    }
  },
});
