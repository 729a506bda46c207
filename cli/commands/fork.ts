// troupe fork <run> --at <step>: a new run from a run's committed versions (weights and optimizer state, by reference) at a step.
import { defineCommand } from '../command';
import { TroupeError } from '../../infra/errors';
import { validateRunConfig } from '../../control/runs';
import { runIdFor } from '../../control/run-id';
import { checkInitSourcesOf, forkBase } from '../../control/fork';
import { readConfigFile } from '../summary';
import { refuseTypeErrors, runConfigInput, startAndWatch, trainOptions } from './train';

export default defineCommand({
  name: 'fork',
  summary: "Start a new run from a run's models and optimizer state at one of its committed steps",
  usage: 'troupe fork <run> --at <step> [train options]',
  description: [
    'Starts a new run whose version 0 of each model is the version it served after step --at of <run>',
    "(weights and optimizer state, by reference: no weight is copied), with <run>'s run config changed by",
    'the options below (as for train; --config: a JSON file of changes). The new run counts its own steps',
    'from 0; `troupe status` and `troupe list` show "forked from <run> at step N". Refused when step N',
    'is not committed (the message names the last committed one). See docs/running.md, "Fork, freeze and init-from".',
  ].join('\n'),
  positionals: true,
  options: {
    at: { type: 'number', valueName: 'STEP', example: '2', description: "the parent's committed step to fork at (required)" },
    ...trainOptions,
  },
  async run({ values, positionals, log }) {
    if (positionals.length !== 1) throw new TroupeError('fork: name one run to fork', 'e.g. npx troupe fork math-20260101-120000-ab12 --at 10');
    const parent = positionals[0] ?? '';
    if (values.at === undefined) throw new TroupeError('--at: required: the step of the run to fork at', `e.g. npx troupe fork ${parent} --at 10`);
    const at = values.at;
    const changes = values.config ? readConfigFile(values.config) : {};
    return startAndWatch(values, log, async (c) => {
      const base = await forkBase(c.sql, parent, at);
      const team = base.team;
      const input = runConfigInput(values, { ...base, ...changes, team, fork: base.fork }, team);
      const runId = values['run-id'] ?? runIdFor(team);
      const config = validateRunConfig({ ...input, runId });
      if (!values['skip-type-check']) refuseTypeErrors(team, log);
      await checkInitSourcesOf(c.sql, config, '--at');
      log(`troupe: forking run ${parent} at step ${at}`);
      return { ...config, runId };
    });
  },
});
