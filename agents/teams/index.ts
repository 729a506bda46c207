/**
 * The team registry: the name a run config uses -> a factory taking the run's
 * `teamOptions`. Imported by workflow code, so every team here must be
 * workflow-safe at import time. Add your own team with one line.
 *
 * Each factory `require`s its module when the team is first loaded (not at
 * import of this file), so a team whose module throws — a definition error, a
 * syntax error — makes only that team unusable: other teams, `troupe list` and
 * `troupe status` keep working.
 */
import { TroupeError, errorMessage } from '../../infra/errors';
import { defineTeam, TeamDefinitionError, type AnyTeam } from '../team';
import { withCheckpoint } from '../model';
import { checkpointTokenizer } from '../tokenizers/checkpoint';
import type { HfTokenizer } from '../tokenizers/hf';
import { chatTemplate, type ChatTemplate } from '../chat-template';
import type { Tokenizer } from '../tokenizer';

export type TeamFactory = (options: Record<string, unknown>) => AnyTeam;

export const teams: Record<string, TeamFactory> = {
  math: (options) => (require('./math') as typeof import('./math')).mathTeam(options as import('./math').MathOptions),
  research: (options) => (require('./research') as typeof import('./research')).researchTeam(options as import('./research').ResearchOptions),
  recall: (options) => (require('./recall') as typeof import('./recall')).recallTeam(options as import('./recall').RecallOptions),
};

/** A team that is not registered or whose definition fails: the user's to fix, and only that team's problem. */
export class TeamLoadError extends TroupeError {
  constructor(
    readonly team: string,
    message: string,
    hint: string,
  ) {
    super(message, hint);
  }
}

/** A checkpoint tokenizer's chat template (tokenizer_config.json / chat_template.jinja), framing turns that end with its EOS. */
function templateOf(tokenizer: Tokenizer): ChatTemplate | undefined {
  const { chatTemplate: source, specialTokens } = tokenizer as Partial<HfTokenizer>;
  if (source === undefined || !specialTokens) return undefined;
  return chatTemplate(source, specialTokens, specialTokens.eos_token ?? tokenizer.decode([tokenizer.eosId]));
}

export function loadTeam(name: string, options: Record<string, unknown> = {}): AnyTeam {
  const make = Object.hasOwn(teams, name) ? teams[name] : undefined;
  if (!make) {
    throw new TeamLoadError(
      name,
      `team: unknown team ${JSON.stringify(name)} (known: ${Object.keys(teams).join(', ')})`,
      'register it with one line in agents/teams/index.ts',
    );
  }
  // The run's, not the team's: every model of the team starts from the `checkpoint` directory
  // (`troupe train --model DIR`), with its tokenizer.json when `checkpointTokenizer`.
  const { checkpoint, checkpointTokenizer: ownTokenizer, ...own } = options;
  try {
    const team = make(own);
    if (checkpoint === undefined) return team;
    const tokenizer = ownTokenizer === true && typeof checkpoint === 'string' ? checkpointTokenizer(checkpoint) : team.tokenizer;
    const models = Object.fromEntries(Object.entries(team.models).map(([m, spec]) => [m, withCheckpoint(spec, checkpoint as string, tokenizer)]));
    return defineTeam({ ...team, tokenizer, models, chatTemplate: team.chatTemplate ?? templateOf(tokenizer) });
  } catch (e) {
    // Bad team options are the run's to fix, not the team's definition: say so, once.
    if (e instanceof TeamDefinitionError && e.issues.every((i) => i.path.startsWith('teamOptions'))) {
      throw new TeamLoadError(name, `team ${name}: ${e.problems.join('; ')}`, 'fix the team options (--team-options, or teamOptions in the run config)');
    }
    throw new TeamLoadError(
      name,
      `team ${JSON.stringify(name)} failed to load: ${errorMessage(e)}`,
      `fix the team's definition (its module in agents/teams/); other teams are unaffected`,
    );
  }
}

/** Loads every registered team with default options; the teams that fail, with why (for worker start-up logs). */
export function teamLoadErrors(): Record<string, string> {
  const failed: Record<string, string> = {};
  for (const name of Object.keys(teams)) {
    try {
      loadTeam(name);
    } catch (e) {
      failed[name] = errorMessage(e);
    }
  }
  return failed;
}
