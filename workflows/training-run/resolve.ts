/**
 * A run's config, team and resolved settings, resolved together: the one place
 * the workflow checks a config against its team. Validation at the start, the
 * optimizer stored by a resumed run, a setOptimizer change (its validator) and
 * the changes applied at a step all go through withOptimizer.
 */
import { patched } from '@temporalio/workflow';
import { loadTeam } from '../../agents/team-registry';
import type { AnyTeam } from '../../agents/team';
import type { OptimizerConfig } from '../../schema/optimizer';
import { checkAgainstTeam, parseRunConfig, poolsOf, RunConfigError, withTeamRunDefaults, type ResolvedTraining, type RunConfig } from '../../schema/run-config';
import { Patch } from '../patches';

export interface Resolved {
  config: RunConfig;
  team: AnyTeam;
  settings: ResolvedTraining;
}

/** The same run with another optimizer; throws RunConfigError or SettingsError naming each bad field. */
export function withOptimizer(r: { config: RunConfig; team: AnyTeam }, optimizer: OptimizerConfig): Resolved {
  const config = { ...r.config, optimizer };
  return { config, team: r.team, settings: checkAgainstTeam(config, r.team) };
}

/**
 * A bad config fails the workflow at once, naming every bad field, having started nothing.
 * `optimizer`: the one a continued execution carries (changes accepted since the start).
 */
export function resolve(rawConfig: unknown, optimizer?: OptimizerConfig): Resolved {
  let config = parseRunConfig(rawConfig);
  let team: AnyTeam;
  try {
    team = loadTeam(config.team, config.teamOptions);
  } catch (e) {
    throw new RunConfigError([{ path: 'team', message: (e as Error).message.replace(/^team: /, '') }]);
  }
  // A config from the CLI or client already holds them; one typed into the Web UI may leave them out.
  if (team.run && patched(Patch.teamRunDefaults)) config = parseRunConfig(withTeamRunDefaults(rawConfig as object, team));
  const resolved = withOptimizer({ config, team }, optimizer ?? config.optimizer);
  const pools = new Set(Object.keys(team.models).map((m) => poolsOf(config, team, m).sample));
  // its episodes would run in workflow code, which cannot read the checkpoint's tokenizer.json
  if (config.rollout === 'durable' && team.tokenizer.kind === 'placeholder')
    throw new RunConfigError([
      {
        path: 'rollout',
        message: `team ${team.name} uses the tokenizer.json of its checkpoint (teamOptions.checkpointTokenizer), which only activities read: use "batched"`,
      },
    ]);
  if (config.rollout === 'batched' && pools.size > 1)
    throw new RunConfigError([{ path: 'rollout', message: `batched rollouts need every model on one pool; team ${team.name} uses ${[...pools].join(', ')}` }]);
  return resolved;
}
