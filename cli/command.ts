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
// Options are parsed strictly with node:util parseArgs; `--help`/`-h` is handled for
// every command by cli/main.ts from these fields. Throw a TroupeError (infra/errors)
// for anything the user can fix: it is printed as one line plus what to do.

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  description: string;
  /** Shown in --help as the value's name, e.g. "N" in "--steps N". */
  valueName?: string;
  default?: string | boolean;
}

export type OptionSpecs = Record<string, OptionSpec>;

export type OptionValues<O extends OptionSpecs> = {
  [K in keyof O]: O[K]['type'] extends 'string' ? string | undefined : boolean | undefined;
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
  /** Longer text for `troupe <name> --help`. */
  description?: string;
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
  description?: string;
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
