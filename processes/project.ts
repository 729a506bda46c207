/**
 * A project: a folder with a troupe.config.ts (found by walking up from the
 * working directory), its teams and estimators, its stack state in `.troupe/`.
 * Every process enters the project once at start (`enterProject`): the CLI,
 * and the workers it spawns (which get the folder as TROUPE_PROJECT). Entering
 * sets the stack defaults (the environment wins), replaces the team registry
 * with the project's teams and loads the estimator modules.
 *
 * User TypeScript is loaded by tsx in Node (the CLI registers tsx/cjs, workers
 * run under `node --import tsx`) and compiled by Temporal's bundler (swc) in the
 * workflow sandbox, for which `workflowsEntry` writes a module that registers the
 * same teams: the same source runs in both places, with no build step of the
 * user's. Outside a project, a source checkout of Troupe enters its examples
 * project (`examples/`), keeping its stack state in the checkout's `.troupe/`.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { useProjectTeams, type ProjectTeamEntry } from '../agents/team-registry';
import { CONFIG_VARIABLES } from '../infra/config';
import { errorMessage, TroupeError } from '../infra/errors';
import { isSourceCheckout } from '../stack/install';
import { repoRoot } from '../infra/paths';
import { parseProjectConfig, ProjectConfigError, TEAM_NAME, type ProjectConfig } from '../schema/project';

/** A source checkout's examples project: what a checkout serves outside any project. */
export const EXAMPLES_CONFIG = path.join(repoRoot, 'examples', 'troupe.config.ts');

export const CONFIG_NAMES = ['troupe.config.ts', 'troupe.config.mts', 'troupe.config.cts', 'troupe.config.js', 'troupe.config.mjs', 'troupe.config.cjs'];

export interface Project {
  /** The folder holding the config file. */
  dir: string;
  /** The config file's absolute path. */
  configFile: string;
  config: ProjectConfig;
  /** Team name → absolute module path. */
  teamFiles: Record<string, string>;
  /** Absolute paths of the estimator modules. */
  estimatorFiles: string[];
  /** Problems that leave the project usable (an estimator module that failed to load). */
  warnings: string[];
}

/** The config file in `from` or the nearest folder above it, or undefined. */
export function findProjectConfig(from = process.cwd()): string | undefined {
  for (let dir = path.resolve(from); ; dir = path.dirname(dir)) {
    for (const name of CONFIG_NAMES) {
      const file = path.join(dir, name);
      if (fs.existsSync(file)) return file;
    }
    if (path.dirname(dir) === dir) return undefined;
  }
}

/** A module path from the config, resolved against the project (extension optional, as in an import). */
export function resolveModule(dir: string, spec: string): string | undefined {
  const base = path.resolve(dir, spec);
  for (const candidate of [base, ...['.ts', '.mts', '.cts', '.tsx', '.js', '.mjs', '.cjs'].map((e) => base + e), path.join(base, 'index.ts')])
    if (fs.existsSync(candidate) && fs.statSync(candidate).isFile()) return candidate;
  return undefined;
}

const rel = (dir: string, file: string) => path.relative(dir, file).split(path.sep).join('/');

function defaultExport(mod: unknown): unknown {
  const m = mod as { default?: unknown; __esModule?: boolean } | null;
  return m && typeof m === 'object' && 'default' in m ? m.default : mod;
}

const MODULE = /^(.*)\.(ts|mts|cts|js|mjs|cjs)$/;

/** `teams: './teams'`: every module directly in the folder is a team named by its file; two files of one name are refused. */
function teamsInFolder(dir: string, folder: string, issues: { path: string; message: string }[]): ProjectConfig['teams'] {
  const abs = path.resolve(dir, folder);
  if (!fs.existsSync(abs) || !fs.statSync(abs).isDirectory()) {
    issues.push({ path: 'teams', message: `folder ${JSON.stringify(folder)} not found (looked in ${dir})` });
    return {};
  }
  const teams: ProjectConfig['teams'] = {};
  for (const file of fs.readdirSync(abs).sort()) {
    const m = MODULE.exec(file);
    if (!m || file.endsWith('.d.ts') || !fs.statSync(path.join(abs, file)).isFile()) continue;
    const name = m[1]!;
    const module = `./${rel(dir, path.join(abs, file))}`;
    if (!TEAM_NAME.test(name)) issues.push({ path: `teams (${module})`, message: 'a team file is named by its team: lower-case letters, digits and -' });
    else if (teams[name]) issues.push({ path: `teams.${name}`, message: `defined twice: ${teams[name].module} and ${module}` });
    else teams[name] = { module };
  }
  return teams;
}

/** Reads and checks a project's config (through tsx: the calling process has it registered). */
export function readProject(configFile: string): Project {
  const dir = path.dirname(configFile);
  const name = path.basename(configFile);
  let raw: unknown;
  try {
    delete require.cache[configFile]; // read what the file says now
    raw = defaultExport(require(configFile));
  } catch (e) {
    throw new TroupeError(`${configFile} failed to load: ${errorMessage(e)}`, 'fix the config file (it must `export default defineConfig({...})`)');
  }
  const config = parseProjectConfig(raw, name);
  const issues = [];
  for (const key of Object.keys(config.stack))
    if (!CONFIG_VARIABLES.includes(key)) issues.push({ path: `stack.${key}`, message: `unknown setting (known: ${CONFIG_VARIABLES.join(', ')})` });
  const estimatorFiles: string[] = [];
  config.estimators.forEach((spec, i) => {
    const file = resolveModule(dir, spec);
    if (file) estimatorFiles.push(file);
    else issues.push({ path: `estimators[${i}]`, message: `module ${JSON.stringify(spec)} not found (looked in ${dir})` });
  });
  if (config.teamsFolder !== undefined) config.teams = teamsInFolder(dir, config.teamsFolder, issues);
  if (issues.length) throw new ProjectConfigError(issues, name);
  const teamFiles: Record<string, string> = {};
  for (const [team, entry] of Object.entries(config.teams)) teamFiles[team] = resolveModule(dir, entry.module) ?? path.resolve(dir, entry.module);
  return { dir, configFile, config, teamFiles, estimatorFiles, warnings: [] };
}

/** Why a team's module cannot be loaded before trying (it is missing), else undefined. */
function missingModule(project: Project, team: string): string | undefined {
  const file = project.teamFiles[team]!;
  if (fs.existsSync(file)) return undefined;
  const spec = project.config.teams[team]!.module;
  return `teams.${team}: module ${JSON.stringify(spec)} not found (${rel(project.dir, path.resolve(project.dir, spec))} in ${project.dir})`;
}

let active: Project | undefined;

/** The project this process entered, if any. */
export function activeProject(): Project | undefined {
  return active;
}

/**
 * Enters the project at `configFile`: stack defaults into the environment (unless set), state in
 * its `.troupe/`, its teams in the registry, its estimators loaded. Idempotent per file.
 * `implicit`: a checkout's examples project, entered because no project was found; it leaves
 * TROUPE_STATE_DIR (the checkout's `.troupe/`) and TROUPE_PROJECT alone, so what this process
 * spawns finds its own project the same way.
 */
export function enterProject(configFile: string, env: NodeJS.ProcessEnv = process.env, opts: { implicit?: boolean } = {}): Project {
  if (active?.configFile === configFile) return active;
  const project = readProject(configFile);
  for (const [k, v] of Object.entries(project.config.stack)) if (env[k] === undefined) env[k] = v;
  if (!opts.implicit) {
    env.TROUPE_STATE_DIR ??= path.join(project.dir, '.troupe');
    env.TROUPE_PROJECT = project.dir;
  }
  for (const file of project.estimatorFiles) {
    try {
      require(file);
    } catch (e) {
      project.warnings.push(`estimators: ${rel(project.dir, file)} failed to load (runs naming its estimators are refused): ${errorMessage(e)}`);
    }
  }
  const entries: Record<string, ProjectTeamEntry> = {};
  for (const [team, entry] of Object.entries(project.config.teams)) {
    const file = project.teamFiles[team]!;
    entries[team] = {
      source: rel(project.dir, file),
      ...(entry.export === undefined ? {} : { export: entry.export }),
      load: () => {
        const missing = missingModule(project, team);
        if (missing) throw new Error(missing);
        return require(file);
      },
    };
  }
  useProjectTeams(entries);
  active = project;
  return project;
}

/**
 * What every process does first: enter the project named by TROUPE_PROJECT or found above `cwd`.
 * Without one, a source checkout enters its examples project; an installed Troupe refuses
 * (`required`) with the `troupe init` hint.
 */
export function enterProjectFromEnvironment(opts: { cwd?: string; env?: NodeJS.ProcessEnv; required?: boolean } = {}): Project | undefined {
  const env = opts.env ?? process.env;
  const from = env.TROUPE_PROJECT ?? opts.cwd ?? process.cwd();
  const file = findProjectConfig(from);
  if (file) return enterProject(file, env);
  if (env.TROUPE_PROJECT) throw new TroupeError(`TROUPE_PROJECT=${env.TROUPE_PROJECT} holds no troupe.config.ts`, 'point it at a project folder, or unset it');
  if (isSourceCheckout(repoRoot) && fs.existsSync(EXAMPLES_CONFIG)) return enterProject(EXAMPLES_CONFIG, env, { implicit: true });
  if (opts.required !== false)
    throw new TroupeError(
      `no Troupe project here: no troupe.config.ts in ${path.resolve(from)} or any folder above it`,
      'run `npx troupe init` to create one (or cd into your project)',
    );
  return undefined;
}

// ---- the workflow sandbox's entry ----

/**
 * Writes `<project>/.troupe/workflows.ts`: Troupe's workflows, with the project's teams and
 * estimators registered when the bundle is loaded. Returns its path (the control worker's
 * workflowsPath). A missing team module becomes a loader that throws, so the bundle still builds.
 */
export function writeWorkflowsEntry(project: Project): string {
  const abs = (p: string) => JSON.stringify(p.split(path.sep).join('/'));
  const troupe = (p: string) => abs(path.join(repoRoot, p));
  const lines = [
    '// Generated by troupe from troupe.config.ts for the control worker: do not edit.',
    `import { useProjectTeams } from ${troupe('agents/team-registry')};`,
    ...project.estimatorFiles.map((f) => `import ${abs(f)};`),
    `export * from ${troupe('workflows')};`,
    'useProjectTeams({',
    ...Object.entries(project.config.teams).map(([team, entry]) => {
      const missing = missingModule(project, team);
      const file = project.teamFiles[team]!;
      const load = missing ? `() => { throw new Error(${JSON.stringify(missing)}); }` : `() => require(${abs(file)})`;
      const exp = entry.export === undefined ? '' : ` export: ${JSON.stringify(entry.export)},`;
      return `  ${JSON.stringify(team)}: { source: ${JSON.stringify(rel(project.dir, file))},${exp} load: ${load} },`;
    }),
    '});',
    '',
  ];
  const out = path.join(project.dir, '.troupe', 'workflows.ts');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  const text = lines.join('\n');
  if (!fs.existsSync(out) || fs.readFileSync(out, 'utf8') !== text) fs.writeFileSync(out, text);
  return out;
}

// ---- team code ----

const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

/** The project's files the team code consists of: the config, team and estimator modules, and their local imports (transitively). */
export function projectCodeFiles(project: Pick<Project, 'configFile' | 'teamFiles' | 'estimatorFiles'>): string[] {
  return localClosure([project.configFile, ...Object.values(project.teamFiles), ...project.estimatorFiles]);
}

/** Files and their local imports, transitively (packages under node_modules left out), sorted. */
export function localClosure(files: readonly string[]): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file) || !fs.existsSync(file)) return;
    seen.add(file);
    if (!/\.(c|m)?(t|j)sx?$/.test(file)) return;
    for (const m of fs.readFileSync(file, 'utf8').matchAll(IMPORT)) {
      const spec = m[1]!;
      const found = resolveModule(path.dirname(file), spec) ?? resolveModule(path.dirname(file), spec.replace(/\.(c|m)?js$/, ''));
      if (found && !found.split(path.sep).includes('node_modules')) visit(found);
    }
  };
  for (const f of files) visit(f);
  return [...seen].sort();
}
