// troupe pipeline <name | file.json>: start a pipeline (a DAG of runs as child workflows) and watch it stage by stage.
import { loadConfig } from '../../infra/config';
import { TroupeError } from '../../infra/errors';
import { defineCommand } from '../command';
import { checkPipelineId, loadPipeline, pipelineIdFor, startPipeline, watchToEnd } from '../../control/pipelines';
import { connectRuns } from '../../control/runs';
import { upWithCurrentTeams } from '../teams';

export default defineCommand({
  name: 'pipeline',
  summary: "Start a pipeline of runs (the project's, or a JSON file) and watch it stage by stage",
  usage: 'troupe pipeline <name | file.json> [--id ID] [--detach] [--json]',
  description: [
    "Starts the pipeline named in troupe.config.ts `pipelines` (or the JSON file's { name, stages }) as one",
    'workflow whose stages are training runs (child workflows, run ids <id>.<stage>). A stage starts when',
    'the stages it comes after have ended; its run config may name their runs ({"$run": "<stage>"}) and',
    'last steps ({"$step": "<stage>"}). Every stage\'s run config is checked against its team first.',
    'A pipeline that fails or is terminated continues with `troupe resume <id>`: ended stages are kept,',
    'the unfinished one resumes at its last committed step. See docs/running.md, "Pipelines".',
  ].join('\n'),
  positionals: true,
  options: {
    id: { type: 'string', valueName: 'ID', description: 'the pipeline id (default <name>-<time>-<random>)' },
    detach: { type: 'boolean', description: 'start and return at once (prints the id)' },
    json: { type: 'boolean', description: 'print the summary as one JSON object on the last line of stdout' },
  },
  async run({ values, positionals, log }) {
    if (positionals.length !== 1) throw new TroupeError('pipeline: name one pipeline (or a .json file)', 'e.g. npx troupe pipeline warm-start');
    const p = loadPipeline(positionals[0] ?? '');
    const id = values.id ?? pipelineIdFor(p.name);
    checkPipelineId(id, '--id');
    const stack = await upWithCurrentTeams(loadConfig(), log);
    const c = await connectRuns(log);
    try {
      const handle = await startPipeline(c, p, id);
      log(`troupe: started pipeline ${id}: ${p.stages.map((s) => s.name).join(' → ')}`);
      if (stack.result.dashboardUrl) log(`troupe: its stages on the dashboard: ${stack.result.dashboardUrl}/#/pipelines/${encodeURIComponent(id)}`);
      if (values.detach) {
        console.log(values.json ? JSON.stringify({ pipelineId: id }) : id);
        return 0;
      }
      return await watchToEnd(handle, log, values.json === true);
    } finally {
      await c.close();
    }
  },
});
