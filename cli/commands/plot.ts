// troupe plot <run>: learning curves (reward components and truncated/failed shares per agent, eval success, grad norm) as PNG and SVG.
import * as path from 'node:path';
import { TroupeError } from '../../infra/errors';
import { defineCommand } from '../command';
import { writePlot } from '../../activities/store/plot';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'plot',
  summary: 'Write the learning curves of a run as PNG and SVG',
  usage: 'troupe plot <run> [--out DIR]',
  positionals: true,
  options: { out: { type: 'string', valueName: 'DIR', description: 'folder for curves.png and curves.svg (default <state>/runs/<run>)' } },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId) throw new TroupeError('plot: name a run', 'list runs with `npx troupe list`');
    const c = await connectRuns(log);
    try {
      const files = await writePlot(c.sql, runId, values.out ?? path.join(c.config.stateDir, 'runs', runId));
      console.log(files.png);
      console.log(files.svg);
      return 0;
    } finally {
      await c.close();
    }
  },
});
