// troupe export <run>: every stored episode of a run as JSONL (one graph trajectory per line).
import * as fs from 'node:fs';
import { TroupeError } from '../../infra/errors';
import { getRun } from '../../activities/store/runs';
import { loadStepEpisodes } from '../../activities/store/trajectories';
import { defineCommand } from '../command';
import { connectRuns } from '../../control/runs';

export default defineCommand({
  name: 'export',
  summary: 'Export the trajectories of a run as JSONL',
  usage: 'troupe export <run> [--out FILE] [--split train|eval]',
  positionals: true,
  options: {
    out: { type: 'string', valueName: 'FILE', description: 'write here instead of stdout' },
    split: { type: 'string', valueName: 'SPLIT', description: 'only train or only eval episodes' },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId) throw new TroupeError('export: name a run', 'list runs with `npx troupe list`');
    if (values.split && values.split !== 'train' && values.split !== 'eval') throw new TroupeError('--split: must be train or eval');
    const c = await connectRuns(log);
    let out: NodeJS.WritableStream | undefined;
    try {
      // Checked before --out is created: an unknown run leaves no empty file behind.
      if (!(await getRun(c.sql, runId))) throw new TroupeError(`no run ${runId}`, 'list runs with `npx troupe list`');
      const steps = await c.sql`SELECT DISTINCT step, split FROM episodes WHERE run_id = ${runId} ORDER BY step, split`;
      if (steps.length === 0) throw new TroupeError(`run ${runId} has no stored episodes`, `see \`npx troupe status ${runId}\``);
      out = values.out ? fs.createWriteStream(values.out) : process.stdout;
      let n = 0;
      for (const s of steps) {
        if (values.split && s.split !== values.split) continue;
        for (const e of await loadStepEpisodes(c.sql, runId, s.step, s.split)) {
          out.write(JSON.stringify({ ...e.meta, ...e.trajectory, rewards: e.rewards, success: e.success }) + '\n');
          n++;
        }
      }
      if (values.out) log(`troupe: wrote ${n} episodes to ${values.out}`);
      return 0;
    } finally {
      if (values.out && out) await new Promise((resolve) => (out as fs.WriteStream).end(resolve));
      await c.close();
    }
  },
});
