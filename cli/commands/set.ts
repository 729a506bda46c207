// troupe set <run> --json '{...}' | --lr X [--model M | --agent A]: change a running run's optimizer (setOptimizer).
import { TroupeError } from '../../infra/errors';
import { defineCommand } from '../command';
import { requireOpenRun, setOptimizer } from '../../control/open-run';
import { connectRuns } from '../../control/runs';

/** The change the flags describe: --json as it is, or the flag settings for every model, one model or one agent. */
export function changeOf(values: { json?: string; lr?: number; 'entropy-coef'?: number; 'kl-coef'?: number; model?: string; agent?: string }): unknown {
  const flags = {
    ...(values.lr !== undefined ? { lr: values.lr } : {}),
    ...(values['entropy-coef'] !== undefined ? { entropyCoef: values['entropy-coef'] } : {}),
    ...(values['kl-coef'] !== undefined ? { kl: { coef: values['kl-coef'] } } : {}),
  };
  const hasFlags = Object.keys(flags).length > 0;
  if (values.json !== undefined) {
    if (hasFlags || values.model !== undefined || values.agent !== undefined)
      throw new TroupeError('set: give either --json or settings flags, not both', `e.g. --json '{"all": {"lr": 0.0005}}'`);
    try {
      return JSON.parse(values.json);
    } catch {
      throw new TroupeError('--json: not JSON', `e.g. --json '{"models": {"policy": {"lr": 0.0005}}}'`);
    }
  }
  if (!hasFlags) throw new TroupeError('set: name a change', `e.g. --lr 0.0005, or --json '{"agents": {"solver": {"clipHigh": 0.28}}}'`);
  if (values.model !== undefined && values.agent !== undefined) throw new TroupeError('set: give --model or --agent, not both');
  if (values.model !== undefined) return { models: { [values.model]: flags } };
  if (values.agent !== undefined) return { agents: { [values.agent]: flags } };
  return { all: flags };
}

export default defineCommand({
  name: 'set',
  summary: "Change a running run's optimizer settings (setOptimizer)",
  usage: 'troupe set <run> (--json CHANGE | --lr X [--entropy-coef X] [--kl-coef X] [--model M | --agent A])',
  description: [
    "Sends the run's `setOptimizer` update: the change is checked against the run's team (every",
    'problem named at once) and takes effect at the next step; the answer says which. A change is',
    '{"all": {...}, "models": {"<model>": {...}}, "agents": {"<agent>": {...}}} with the settings of',
    'the run config\'s optimizer (README: "Optimizer settings"), e.g. --json \'{"all": {"lr": 0.0005}}\'.',
  ].join('\n'),
  positionals: true,
  options: {
    json: { type: 'string', valueName: 'CHANGE', description: 'the change as JSON' },
    lr: { type: 'number', valueName: 'X', example: '0.0005', description: 'learning rate' },
    'entropy-coef': { type: 'number', valueName: 'X', example: '0.001', description: 'entropy bonus coefficient' },
    'kl-coef': { type: 'number', valueName: 'X', example: '0.001', description: 'KL penalty coefficient' },
    model: { type: 'string', valueName: 'M', description: 'apply the flags to this model only' },
    agent: { type: 'string', valueName: 'A', description: 'apply the flags to this agent only' },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId || positionals.length > 1) throw new TroupeError('set: name one run', 'list runs with `npx troupe list`');
    const change = changeOf(values);
    const c = await connectRuns(log);
    try {
      const open = await requireOpenRun(c, runId, 'set');
      const { effectiveStep } = await setOptimizer(c, open, runId, change);
      console.log(`run ${runId}: optimizer change accepted; it takes effect at step ${effectiveStep}`);
      return 0;
    } finally {
      await c.close();
    }
  },
});
