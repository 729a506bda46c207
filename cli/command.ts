// What a `troupe` command is. One file per command under cli/commands/, exporting
// `default defineCommand({...})`, plus one line in cli/commands/index.ts.
//
//   export default defineCommand({
//     name: 'status',
//     summary: 'Show the state of a training run',
//     usage: 'troupe status <run-id> [--json]',
//     options: { json: { type: 'boolean', description: 'print JSON' } },
//     positionals: true,
//     async run({ values, positionals }) { ... return 0; },
//   });
//
// Options are parsed strictly (parseOptions below); `--help`/`-h` is handled for
// every command by cli/main.ts from these fields. Throw a TroupeError (infra/errors)
// for anything the user can fix: it is printed as one line plus what to do.
import { parseArgs } from 'node:util';
import { TroupeError } from '../infra/errors';

export interface OptionSpec {
  /** `number`: parsed here, so a command gets a finite number or the user a message naming the option. */
  type: 'string' | 'number' | 'boolean';
  short?: string;
  description: string;
  /** Shown in --help as the value's name, e.g. "N" in "--steps N". */
  valueName?: string;
  default?: string | boolean;
  /** A sensible value, shown in the hint when the given one is not a number (e.g. "0.001" for --lr). */
  example?: string;
}

export type OptionSpecs = Record<string, OptionSpec>;

export type OptionValues<O extends OptionSpecs> = {
  [K in keyof O]: O[K]['type'] extends 'string' ? string | undefined : O[K]['type'] extends 'number' ? number | undefined : boolean | undefined;
};

export interface CommandContext<O extends OptionSpecs> {
  values: OptionValues<O>;
  positionals: string[];
  /** Progress lines (stderr). Results go to stdout with console.log. */
  log: (line: string) => void;
}

export interface CommandSpec<O extends OptionSpecs> {
  name: string;
  /** One line, shown in `troupe --help`. */
  summary: string;
  /** e.g. "troupe up [options]". */
  usage: string;
  /** Longer text for `troupe <name> --help`; a function when it depends on the project (its teams). */
  description?: string | (() => string);
  options?: O;
  /** Accept positional arguments (default: none allowed). */
  positionals?: boolean;
  /** Exit code (default 0). */
  run(ctx: CommandContext<O>): Promise<number | void>;
}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  description?: string | (() => string);
  options: OptionSpecs;
  positionals: boolean;
  run(ctx: CommandContext<OptionSpecs>): Promise<number | void>;
}

export function defineCommand<O extends OptionSpecs>(spec: CommandSpec<O>): Command {
  return {
    name: spec.name,
    summary: spec.summary,
    usage: spec.usage,
    description: spec.description,
    options: spec.options ?? {},
    positionals: spec.positionals ?? false,
    run: spec.run as Command['run'],
  };
}

/** `-3`, `-0.5`, `-.5`, `-1e-3`, `-Infinity`: a value, not an option. */
const NEGATIVE_NUMBER = /^-(\d|\.\d|Infinity$)/;

/**
 * Parses a command's arguments strictly. A negative number after an option
 * that takes a value is that value (`--steps -3` means `--steps=-3`), so it
 * gets the same message about its range as any other value.
 */
export function parseOptions(cmd: Command, args: readonly string[]): { values: Record<string, string | number | boolean | undefined>; positionals: string[] } {
  /** The long name of `--name` or `-s` when that option takes a value. */
  const valueOption = (arg: string): string | undefined => {
    const name = arg.startsWith('--') ? arg.slice(2) : Object.keys(cmd.options).find((n) => arg === `-${cmd.options[n]!.short}`);
    return name !== undefined && cmd.options[name] !== undefined && cmd.options[name]!.type !== 'boolean' ? name : undefined;
  };
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const next = args[i + 1];
    const name = /^--?[^-=][^=]*$/.test(arg) ? valueOption(arg) : undefined;
    if (name !== undefined && next !== undefined && NEGATIVE_NUMBER.test(next)) {
      joined.push(`--${name}=${next}`);
      i++;
    } else joined.push(arg);
  }
  const options = Object.fromEntries(
    Object.entries(cmd.options).map(([name, o]) => [
      name,
      {
        type: o.type === 'boolean' ? ('boolean' as const) : ('string' as const),
        ...(o.short ? { short: o.short } : {}),
        ...(o.default !== undefined ? { default: o.default } : {}),
      },
    ]),
  );
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: joined, options, allowPositionals: cmd.positionals, strict: true }) as typeof parsed;
  } catch (err) {
    // node's message is several sentences on several lines; keep it whole, on one line.
    const msg = (err as Error).message.replace(/\. To specify a positional argument.*$/s, '').replace(/\s*\n\s*/g, ' ');
    throw new TroupeError(`${cmd.name}: ${msg}`, `see \`npx troupe ${cmd.name} --help\``);
  }
  const values: Record<string, string | number | boolean | undefined> = { ...parsed.values };
  for (const [name, o] of Object.entries(cmd.options)) {
    const v = parsed.values[name];
    if (o.type === 'number' && typeof v === 'string') values[name] = parseNumber(name, v, o);
  }
  return { values, positionals: parsed.positionals };
}

function parseNumber(name: string, v: string, o: OptionSpec): number {
  const n = v.trim() === '' ? NaN : Number(v);
  if (!Number.isFinite(n)) throw new TroupeError(`--${name}: expected a number, got ${JSON.stringify(v)}`, `e.g. --${name} ${o.example ?? 1}`);
  return n;
}
