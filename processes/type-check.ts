/**
 * Type errors in a project's team, found before a run starts. Workers load team code with tsx
 * and Temporal's bundler, which strip types without checking them, so a team with a type error
 * would otherwise load and fail (or worse, misbehave) mid-run. The check uses the project's
 * own TypeScript (else Troupe's, when installed) and the project's tsconfig.json, and reports
 * only errors in the team's own files (its module and its local imports). Results are cached in
 * `.troupe/type-check/` by the files' contents, so an unchanged team is not checked again.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { repoRoot } from '../infra/paths';
import { localClosure, type Project } from './project';

export interface TypeCheckResult {
  /** `file:line:col: message`, paths relative to the project; empty when the team checks. */
  errors: string[];
  /** Why nothing was checked (no TypeScript or no tsconfig.json), else undefined. */
  skipped?: string;
}

/** At most this many errors are listed (the rest counted). */
export const MAX_LISTED = 5;

type TS = typeof import('typescript');

/** The TypeScript a project's teams are checked with: the project's own, else Troupe's (when installed). */
export function findTypeScript(dir: string): string | undefined {
  try {
    return require.resolve('typescript', { paths: [dir, repoRoot] });
  } catch {
    return undefined;
  }
}

function loadTypeScript(project: Project): TS | undefined {
  const found = findTypeScript(project.dir);
  return found === undefined ? undefined : (require(found) as TS);
}

/** Why no TypeScript was found: listed in the project's package.json (`troupe init` adds it) but not installed, or not listed. */
export function noTypeScriptReason(dir: string): string {
  let listed = false;
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as Record<string, Record<string, unknown> | undefined>;
    listed = pkg.devDependencies?.typescript !== undefined || pkg.dependencies?.typescript !== undefined;
  } catch {
    /* no package.json, or not JSON: not listed */
  }
  return listed ? 'TypeScript is in package.json but not installed (run npm install)' : 'TypeScript is not installed (npm install -D typescript)';
}

/** Type-checks team `name` of `project` (its module and local imports). */
export function typeCheckTeam(project: Project, name: string): TypeCheckResult {
  const entry = project.teamFiles[name];
  if (!entry) return { errors: [], skipped: `no team "${name}" in ${project.configFile}` };
  const tsconfig = path.join(project.dir, 'tsconfig.json');
  if (!fs.existsSync(tsconfig)) return { errors: [], skipped: 'the project has no tsconfig.json' };
  const ts = loadTypeScript(project);
  if (!ts) return { errors: [], skipped: noTypeScriptReason(project.dir) };

  const files = localClosure([entry]).filter((f) => /\.(c|m)?tsx?$/.test(f));
  const key = createHash('sha256').update(ts.version).update(fs.readFileSync(tsconfig));
  for (const f of files) key.update(f).update(fs.readFileSync(f));
  const cacheFile = path.join(project.dir, '.troupe', 'type-check', `${key.digest('hex').slice(0, 24)}.json`);
  try {
    return JSON.parse(fs.readFileSync(cacheFile, 'utf8')) as TypeCheckResult;
  } catch {
    /* not checked yet */
  }

  const read = ts.readConfigFile(tsconfig, (f) => ts.sys.readFile(f));
  if (read.error) return { errors: [`tsconfig.json: ${ts.flattenDiagnosticMessageText(read.error.messageText, ' ')}`] };
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, project.dir);
  const program = ts.createProgram({ rootNames: files, options: { ...parsed.options, noEmit: true } });
  const mine = new Set(files.map((f) => path.resolve(f)));
  const errors: string[] = [];
  for (const d of ts.getPreEmitDiagnostics(program)) {
    if (d.category !== ts.DiagnosticCategory.Error || !d.file || !mine.has(path.resolve(d.file.fileName))) continue;
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
    errors.push(`${path.relative(project.dir, d.file.fileName)}:${line + 1}:${character + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
  }
  const result: TypeCheckResult = { errors };
  fs.mkdirSync(path.dirname(cacheFile), { recursive: true });
  fs.writeFileSync(cacheFile, JSON.stringify(result));
  return result;
}
