// troupe init [dir]: scaffolds a project (troupe.config.ts, one example team, a tsconfig, a .gitignore for .troupe/).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TroupeError } from '../../infra/errors';
import { CONFIG_NAMES, findProjectConfig } from '../../processes/project';
import { defineCommand } from '../command';
import { SCAFFOLD } from '../scaffold';

export default defineCommand({
  name: 'init',
  summary: 'Create a Troupe project: troupe.config.ts, an example team, a tsconfig',
  usage: 'troupe init [dir]',
  description:
    'Writes troupe.config.ts (teams by name -> module), teams/count.ts (a one-agent team that trains on a CPU in\n' +
    'seconds), tsconfig.json and .gitignore lines for .troupe/ (the stack state) into DIR (default: here).\n' +
    'Existing files are never overwritten. Then: `npx troupe train count --steps 2`.',
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
    const ignore = path.join(dir, '.gitignore');
    const before = fs.existsSync(ignore) ? fs.readFileSync(ignore, 'utf8') : '';
    const missing = ['.troupe/', 'node_modules/'].filter((l) => !before.split('\n').includes(l));
    if (missing.length) {
      fs.writeFileSync(ignore, `${before === '' ? '' : before.replace(/\n*$/, '\n')}${missing.join('\n')}\n`);
      written.push('.gitignore');
    }
    console.log(`troupe: project in ${dir}: wrote ${written.join(', ') || 'nothing (all files exist)'}`);
    console.log('  next: npx troupe train count --steps 2     (starts the stack in .troupe/ on first use)');
    return 0;
  },
});
