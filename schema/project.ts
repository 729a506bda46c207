/**
 * A project's troupe.config.ts: which teams it has (name → module), the modules
 * every process loads at start (estimators), and defaults for the stack. Checked
 * when defined, each problem named by its field (`teams.hello: ...`). Workflow-safe
 * (the package root exports defineConfig); the Node side that finds and loads a
 * project is processes/project.ts.
 */
import { FieldError, type FieldIssue } from '../infra/issues';
import { parsePipeline, type Pipeline, type PipelineStageInput } from './pipeline';

/** A team entry: a module path (relative to the config file), or a module and the name of its export. */
export type TeamEntry = string | { module: string; export?: string };

export interface ProjectConfigInput {
  /**
   * Teams by the name run configs use → the module that exports it (a team, or a function of the
   * run's teamOptions returning one); or a folder, each module directly in it a team named by its file.
   */
  teams: Record<string, TeamEntry> | string;
  /** Modules every process loads at start, before any run config is checked: those calling defineEstimator. */
  estimators?: string[];
  /** Defaults for the stack, by environment variable (TEMPORAL_ADDRESS, DATABASE_URL, TROUPE_DEVICE, TROUPE_DASHBOARD_PORT, ...); the environment wins. */
  stack?: Record<string, string | number | boolean>;
  /** Pipelines by name (`troupe pipeline <name>`): stages of runs, docs/running.md "Pipelines". */
  pipelines?: Record<string, { stages: PipelineStageInput[] }>;
}

export interface ProjectConfig {
  /** Empty when `teamsFolder` is given: the folder's modules are listed where files can be read (processes/project.ts). */
  teams: Record<string, { module: string; export?: string }>;
  teamsFolder?: string;
  estimators: string[];
  stack: Record<string, string>;
  pipelines: Record<string, Pipeline>;
}

export class ProjectConfigError extends FieldError {
  constructor(issues: readonly FieldIssue[], file?: string) {
    super(issues, file ? `invalid project config ${file}` : 'invalid project config');
    this.name = 'ProjectConfigError';
  }
}

const TEAM_NAME = /^[a-z][a-z0-9-]{0,39}$/; // defineTeam's rule
const describe = (v: unknown) => (typeof v === 'string' ? JSON.stringify(v) : v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v);

/** The config's problems, each by field path (empty when valid). */
export { TEAM_NAME };

export function projectConfigIssues(input: unknown): FieldIssue[] {
  const issues: FieldIssue[] = [];
  const add = (path: string, message: string) => issues.push({ path, message });
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return [{ path: '(config)', message: `must be an object (export default defineConfig({...})), got ${describe(input)}` }];
  const c = input as Record<string, unknown>;
  for (const key of Object.keys(c))
    if (!['teams', 'estimators', 'stack', 'pipelines'].includes(key)) add(key, 'unknown field (known: teams, estimators, stack, pipelines)');
  if (typeof c.teams === 'string') {
    if (c.teams === '') add('teams', 'must be a folder or an object of team name → module path, got ""');
  } else if (typeof c.teams !== 'object' || c.teams === null || Array.isArray(c.teams))
    add('teams', `must be a folder or an object of team name → module path, got ${describe(c.teams)}`);
  else
    for (const [name, entry] of Object.entries(c.teams)) {
      const at = `teams.${name}`;
      if (!TEAM_NAME.test(name)) add(at, 'a team name is lower-case letters, digits and -, starting with a letter, as defineTeam requires');
      const module = typeof entry === 'string' ? entry : typeof entry === 'object' && entry !== null ? (entry as { module?: unknown }).module : undefined;
      if (typeof module !== 'string' || module === '')
        add(typeof entry === 'object' && entry !== null ? `${at}.module` : at, `must be a module path, got ${describe(module ?? entry)}`);
      const exp = typeof entry === 'object' && entry !== null ? (entry as { export?: unknown }).export : undefined;
      if (exp !== undefined && typeof exp !== 'string') add(`${at}.export`, `must be an export name, got ${describe(exp)}`);
    }
  if (c.estimators !== undefined) {
    if (!Array.isArray(c.estimators)) add('estimators', `must be an array of module paths, got ${describe(c.estimators)}`);
    else c.estimators.forEach((m, i) => typeof m !== 'string' && add(`estimators[${i}]`, `must be a module path, got ${describe(m)}`));
  }
  if (c.stack !== undefined) {
    if (typeof c.stack !== 'object' || c.stack === null || Array.isArray(c.stack))
      add('stack', `must be an object of environment variable → value, got ${describe(c.stack)}`);
    else
      for (const [k, v] of Object.entries(c.stack))
        if (!['string', 'number', 'boolean'].includes(typeof v)) add(`stack.${k}`, `must be a string, number or boolean, got ${describe(v)}`);
  }
  if (c.pipelines !== undefined) {
    if (typeof c.pipelines !== 'object' || c.pipelines === null || Array.isArray(c.pipelines))
      add('pipelines', `must be an object of pipeline name → { stages: [...] }, got ${describe(c.pipelines)}`);
    else for (const [name, p] of Object.entries(c.pipelines)) issues.push(...pipelineIssues(name, p));
  }
  return issues;
}

/** A pipeline entry's problems, under `pipelines.<name>`. */
function pipelineIssues(name: string, p: unknown): FieldIssue[] {
  if (typeof p !== 'object' || p === null || Array.isArray(p)) return [{ path: `pipelines.${name}`, message: `must be { stages: [...] }, got ${describe(p)}` }];
  try {
    parsePipeline({ ...p, name });
    return [];
  } catch (e) {
    if (!(e instanceof FieldError)) throw e;
    return e.issues.map((i) => ({ path: `pipelines.${name}.${i.path}`, message: i.message }));
  }
}

/** Normalizes a config; throws ProjectConfigError naming every bad field. */
export function parseProjectConfig(input: unknown, file?: string): ProjectConfig {
  const issues = projectConfigIssues(input);
  if (issues.length) throw new ProjectConfigError(issues, file);
  const c = input as ProjectConfigInput;
  return {
    teams:
      typeof c.teams === 'string'
        ? {}
        : Object.fromEntries(Object.entries(c.teams).map(([name, e]) => [name, typeof e === 'string' ? { module: e } : { ...e }])),
    ...(typeof c.teams === 'string' ? { teamsFolder: c.teams } : {}),
    estimators: [...(c.estimators ?? [])],
    stack: Object.fromEntries(Object.entries(c.stack ?? {}).map(([k, v]) => [k, String(v)])),
    pipelines: Object.fromEntries(Object.entries(c.pipelines ?? {}).map(([name, p]) => [name, parsePipeline({ ...p, name })])),
  };
}

/** `export default defineConfig({ teams: { hello: './teams/hello.ts' } })` in troupe.config.ts: typed, and checked when defined. */
export function defineConfig(config: ProjectConfigInput): ProjectConfigInput {
  parseProjectConfig(config);
  return config;
}
