// troupe list: training runs as Temporal lists them (with Troupe's search attributes).
import { defineCommand } from '../command';
import { connectRuns } from '../runs';

export default defineCommand({
  name: 'list',
  summary: 'List training runs',
  usage: 'troupe list [--json] [--limit N]',
  options: {
    json: { type: 'boolean', description: 'one JSON object per line' },
    limit: { type: 'string', valueName: 'N', description: 'at most N runs (default 20)', default: '20' },
  },
  async run({ values, log }) {
    const c = await connectRuns(log);
    try {
      const limit = Math.max(1, Number(values.limit) || 20);
      const rows: Array<Record<string, unknown>> = [];
      for await (const w of c.client.workflow.list({ query: `WorkflowType = 'trainingRun'` })) {
        const sa = w.typedSearchAttributes;
        const get = (name: string) => sa.getAll().find((p) => p.key.name === name)?.value;
        rows.push({ workflowId: w.workflowId, status: w.status.name, team: get('TroupeTeam'), step: get('TroupeStep'), phase: get('TroupeStatus'), evalSuccess: get('TroupeEvalSuccess'), started: w.startTime.toISOString() });
        if (rows.length >= limit) break;
      }
      if (values.json) for (const r of rows) console.log(JSON.stringify(r));
      else {
        console.log(`${'run'.padEnd(36)} ${'team'.padEnd(9)} ${'workflow'.padEnd(11)} ${'phase'.padEnd(10)} step  eval   started`);
        for (const r of rows) console.log(`${String(r.workflowId).padEnd(36)} ${String(r.team ?? '-').padEnd(9)} ${String(r.status).padEnd(11)} ${String(r.phase ?? '-').padEnd(10)} ${String(r.step ?? '-').padStart(4)}  ${typeof r.evalSuccess === 'number' ? r.evalSuccess.toFixed(2) : ' -  '}   ${r.started}`);
        if (rows.length === 0) console.log('(no runs yet: npx troupe train math)');
      }
      return 0;
    } finally {
      await c.close();
    }
  },
});
