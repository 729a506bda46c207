// troupe init [dir]: scaffolds a project (troupe.config.ts, one example team, a tsconfig, a .gitignore for .troupe/)
// and adds TypeScript, the version Troupe pins, to its package.json devDependencies.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TroupeError } from '../../infra/errors';
import { repoRoot } from '../../infra/paths';
import { CONFIG_NAMES, findProjectConfig } from '../../processes/project';
import { findTypeScript } from '../../processes/type-check';
import { defineCommand } from '../command';
import { SCAFFOLD } from '../scaffold';

export default defineCommand({
  name: 'init',
  summary: 'Create a Troupe project: troupe.config.ts, an example team, a tsconfig',
  usage: 'troupe init [dir]',
  description:
    'Writes troupe.config.ts (teams by name -> module), teams/count.ts (a one-agent team that trains on a CPU in\n' +
    'seconds), tsconfig.json and .gitignore lines for .troupe/ (the stack state) into DIR (default: here), and adds\n' +
    "TypeScript (the version Troupe pins) to package.json's devDependencies: `train` type-checks a team before it\n" +
    'starts. Existing files are never overwritten. Then: `npm install`, `npx troupe train count --steps 2`.',
  positionals: true,
  async run({ positionals, log }) {
    if (positionals.length > 1) throw new TroupeError('init: at most one folder', 'usage: troupe init [dir]');
    const dir = path.resolve(positionals[0] ?? '.');
    const existing = CONFIG_NAMES.map((n) => path.join(dir, n)).find((f) => fs.existsSync(f));
    if (existing) throw new TroupeError(`init: ${existing} exists already`, 'this folder is a project; add teams under `teams` in its config');
    const above = findProjectConfig(path.dirname(dir));
    if (above) log(`troupe: note: ${above} is a project above this one; commands run in ${dir} will use the new one`);
    fs.mkdirSync(dir, { recursive: true });
    const written: string[] = [];
    for (const [file, text] of Object.entries(SCAFFOLD)) {
      const target = path.join(dir, file);
      if (fs.existsSync(target)) continue;
      fs.mkdirSync(path.dirname(target), { recursive: true });
      fs.writeFileSync(target, text(path.basename(dir)));
      written.push(file);
    }
    if (addTypeScript(path.join(dir, 'package.json')) && !written.includes('package.json')) written.push('package.json (devDependencies.typescript)');
    const ignore = path.join(dir, '.gitignore');
    const before = fs.existsSync(ignore) ? fs.readFileSync(ignore, 'utf8') : '';
    const missing = ['.troupe/', 'node_modules/'].filter((l) => !before.split('\n').includes(l));
    if (missing.length) {
      fs.writeFileSync(ignore, `${before === '' ? '' : before.replace(/\n*$/, '\n')}${missing.join('\n')}\n`);
      written.push('.gitignore');
    }
    console.log(`troupe: project in ${dir}: wrote ${written.join(', ') || 'nothing (all files exist)'}`);
    if (!findTypeScript(dir)) console.log('  next: npm install                         (installs TypeScript: train type-checks a team before it starts)');
    console.log('  next: npx troupe train count --steps 2     (starts the stack in .troupe/ on first use)');
    return 0;
  },
});

/** The TypeScript version Troupe itself pins (its package.json), which a scaffolded project gets. */
export function pinnedTypeScript(): string | undefined {
  const own = JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
  return own.devDependencies?.typescript ?? own.dependencies?.typescript;
}

/**
 * Adds TypeScript to the project's devDependencies unless the project names it already (in any
 * dependency list); keeps the file's other fields and indentation. Whether it changed the file.
 */
export function addTypeScript(packageFile: string): boolean {
  const version = pinnedTypeScript();
  if (!version || !fs.existsSync(packageFile)) return false;
  const text = fs.readFileSync(packageFile, 'utf8');
  let pkg: Record<string, unknown>;
  try {
    pkg = JSON.parse(text);
  } catch {
    return false; // not ours to repair; npm will say what is wrong with it
  }
  const lists = ['dependencies', 'devDependencies', 'peerDependencies', 'optionalDependencies'] as const;
  if (lists.some((l) => (pkg[l] as Record<string, unknown> | undefined)?.typescript !== undefined)) return false;
  pkg.devDependencies = { ...(pkg.devDependencies as Record<string, string> | undefined), typescript: version };
  const indent = /^[ \t]+(?=")/m.exec(text)?.[0] ?? 2;
  fs.writeFileSync(packageFile, `${JSON.stringify(pkg, null, indent)}\n`);
  return true;
}
