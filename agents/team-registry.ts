/**
 * The team registry: the name a run config uses -> a factory taking the run's
 * `teamOptions`. Imported by workflow code. It starts empty: every process enters
 * a project first (processes/project.ts: troupe.config.ts, or in a source checkout
 * of Troupe its examples project, `examples/`), whose teams `useProjectTeams`
 * registers, in every process and in the workflow sandbox.
 *
 * Each factory `require`s its module when the team is first loaded (not at
 * registration), so a team whose module throws — a definition error, a syntax
 * error — makes only that team unusable: other teams, `troupe list` and
 * `troupe status` keep working.
 */
import { setNewest } from '../infra/bounded-map';
import { TroupeError, errorMessage } from '../infra/errors';
import { defineTeam, TeamDefinitionError, type AnyTeam } from './team';
import { withCheckpoint } from './model';
import { checkpointTokenizer } from './tokenizers/checkpoint';
import type { HfTokenizer } from './tokenizers/hf';
import { chatTemplate, type ChatTemplate } from './chat-template';
import type { Tokenizer } from './tokenizer';

export type TeamFactory = (options: Record<string, unknown>) => AnyTeam;

/** The registry in use (filled in place by useProjectTeams, so importers keep one object). */
export const teams: Record<string, TeamFactory> = {};
/** Where each team is defined (its module in the project), for messages. */
const sources: Record<string, string> = {};
const whereDefined = (team: string) => sources[team] ?? 'its module';
const registerHint = 'add it under `teams` in troupe.config.ts';

/** A project's team: its module (loaded when the team first is), which export, and the path to name in messages. */
export interface ProjectTeamEntry {
  load: () => unknown;
  export?: string;
  /** The module's path, relative to the project (for messages). */
  source: string;
}

const isTeam = (v: unknown): v is AnyTeam =>
  typeof v === 'object' && v !== null && typeof (v as AnyTeam).episode === 'function' && Array.isArray((v as AnyTeam).roles);

/** The team a module exports: `export` if named, else its default, else its only export that is a team or a function. */
export function teamFromModule(name: string, mod: unknown, entry: Pick<ProjectTeamEntry, 'export' | 'source'>, options: Record<string, unknown>): AnyTeam {
  const exports = (typeof mod === 'object' && mod !== null ? mod : {}) as Record<string, unknown>;
  let key = entry.export;
  if (key === undefined) {
    if (exports.default !== undefined) key = 'default';
    else {
      const candidates = Object.keys(exports).filter((k) => isTeam(exports[k]) || typeof exports[k] === 'function');
      if (candidates.length !== 1)
        throw new TeamDefinitionError(name, [
          {
            path: `teams.${name}.export`,
            message: `${entry.source} has ${candidates.length ? `several candidate exports (${candidates.join(', ')})` : 'no default export and no export that is a team'}: export the team as default or name it ({ module, export })`,
          },
        ]);
      key = candidates[0]!;
    }
  }
  const value = exports[key];
  if (!Object.hasOwn(exports, key) && value === undefined)
    throw new TeamDefinitionError(name, [{ path: `teams.${name}.export`, message: `${entry.source} has no export ${JSON.stringify(key)}` }]);
  const team = typeof value === 'function' && !isTeam(value) ? (value as (o: Record<string, unknown>) => unknown)(options) : value;
  if (!isTeam(team))
    throw new TeamDefinitionError(name, [
      {
        path: `teams.${name}.export`,
        message: `export ${JSON.stringify(key)} of ${entry.source} is not a team (defineTeam(...)) nor a function of the team options returning one`,
      },
    ]);
  if (team.name !== name)
    throw new TeamDefinitionError(name, [
      { path: `teams.${name}`, message: `${entry.source} defines team ${JSON.stringify(team.name)}: the name in troupe.config.ts must be the team's name` },
    ]);
  return team;
}

/** Replaces the registry with a project's teams. */
export function useProjectTeams(entries: Record<string, ProjectTeamEntry>): void {
  for (const k of Object.keys(teams)) delete teams[k];
  for (const k of Object.keys(sources)) delete sources[k];
  for (const [name, entry] of Object.entries(entries)) {
    teams[name] = (options) => teamFromModule(name, entry.load(), entry, options);
    sources[name] = entry.source;
  }
}

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

/**
 * Teams made, per factory and options. A factory's team is a definition (pure in
 * its options), but making one can cost: recall's generated tasks are 4,000
 * tasks, ~10 ms, which every activity of a step paid again. Keyed by the factory,
 * so a registry that is replaced (useProjectTeams) makes them anew; failures are
 * not kept. The checkpoint wrapping below is not kept: it reads the process's
 * state (a worker's tokenizer loader, or workflow code's placeholder).
 */
const made = new WeakMap<TeamFactory, Map<string, AnyTeam>>();
const MADE_PER_FACTORY = 8;

function makeOnce(make: TeamFactory, options: Record<string, unknown>): AnyTeam {
  const key = JSON.stringify(options);
  let mine = made.get(make);
  const have = mine?.get(key);
  if (have) return have;
  if (!mine) made.set(make, (mine = new Map()));
  return setNewest(mine, key, make(options), MADE_PER_FACTORY);
}

export function loadTeam(name: string, options: Record<string, unknown> = {}): AnyTeam {
  const make = Object.hasOwn(teams, name) ? teams[name] : undefined;
  if (!make) {
    throw new TeamLoadError(name, `team: unknown team ${JSON.stringify(name)} (known: ${Object.keys(teams).join(', ') || 'none'})`, registerHint);
  }
  // The run's, not the team's: every model of the team starts from the `checkpoint` directory
  // (`troupe train --model DIR`), with its tokenizer.json when `checkpointTokenizer`.
  const { checkpoint, checkpointTokenizer: ownTokenizer, ...own } = options;
  try {
    const team = makeOnce(make, own);
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
      `fix the team's definition (${whereDefined(name)}); other teams are unaffected`,
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
