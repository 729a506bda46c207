/**
 * The code sandbox as a tool kind: `sandboxTool({ languages, limits })` in a team file
 * gives a tool that runs the agent's snippet (Python or shell) in bubblewrap, one
 * sandbox per call. This module is the workflow-safe half (options, schemas, render):
 * teams are bundled into the workflow sandbox, where Node APIs are not allowed, so the
 * runner itself lives in activities/sandbox.ts and executeTool hands sandbox tools to it.
 */
import { z } from 'zod';
import { describe, FieldError, type FieldIssue } from '../infra/issues';
import { defineTool, type Tool } from './tool';

export const sandboxLanguages = ['python', 'shell'] as const;
export type SandboxLanguage = (typeof sandboxLanguages)[number];

export interface SandboxLimits {
  /** Wall-clock time of one call; past it the whole sandbox is killed and the call is a tool error. */
  wallMs: number;
  /** CPU time (RLIMIT_CPU); past it the snippet gets SIGXCPU and the call is a tool error. */
  cpuSeconds: number;
  /** Address space of each process (RLIMIT_AS): an allocation past it fails inside the snippet. */
  memoryMb: number;
  /** Processes the snippet may have at once (RLIMIT_NPROC, counted per sandbox): a fork past it fails. */
  processes: number;
  /** Bytes kept of stdout and of stderr each; the rest is read and dropped, and the result says so. */
  outputBytes: number;
  /** Size of the scratch directory (an in-memory tmpfs, gone when the call ends; /tmp and /dev/shm are the same), and of any one file written. */
  scratchMb: number;
}

export const defaultSandboxLimits: Readonly<SandboxLimits> = {
  wallMs: 10_000,
  cpuSeconds: 5,
  memoryMb: 256,
  processes: 32,
  outputBytes: 64 * 1024,
  scratchMb: 16,
};

/** Bounds of each limit: past the upper one a "limit" would stop protecting the worker. */
const limitBounds: Record<keyof SandboxLimits, [number, number]> = {
  wallMs: [100, 600_000],
  cpuSeconds: [1, 600],
  memoryMb: [16, 64 * 1024],
  processes: [1, 4096],
  outputBytes: [1, 16 * 1024 * 1024],
  scratchMb: [1, 4096],
};

export interface SandboxToolOptions {
  /** The tool's name (default "run_code"). */
  name?: string;
  description?: string;
  /** What the agent may run (default both); the first is the default when the agent names none. */
  languages?: readonly SandboxLanguage[];
  limits?: Partial<SandboxLimits>;
  /** The bubblewrap binary (default `bwrap` on PATH). */
  bwrap?: string;
}

/** What the runner (activities/sandbox.ts) needs: resolved options. */
export interface SandboxSpec {
  readonly languages: readonly SandboxLanguage[];
  readonly limits: Readonly<SandboxLimits>;
  readonly bwrap: string;
}

export interface SandboxInput {
  language: SandboxLanguage;
  code: string;
}

/** `exitCode` is the snippet's (128 + N when a signal N ended it); a non-zero exit is a result, not a tool error. */
export interface SandboxOutput {
  exitCode: number;
  stdout: string;
  stderr: string;
  /** True when stdout or stderr passed limits.outputBytes and was cut there. */
  truncated: boolean;
}

/** Largest snippet accepted: it is copied into the sandbox's scratch directory. */
const maxCodeChars = 256 * 1024;

/** The key a sandbox tool keeps its spec under; a registered symbol, so copies of this module agree. */
const specKey = Symbol.for('troupe.sandboxTool');

/** The spec of a tool made by sandboxTool, else undefined (executeTool's dispatch). */
export function sandboxSpecOf(tool: Tool): SandboxSpec | undefined {
  return (tool as unknown as Record<symbol, SandboxSpec | undefined>)[specKey];
}

function optionIssues(opts: SandboxToolOptions): FieldIssue[] {
  const issues: FieldIssue[] = [];
  const bad = (path: string, message: string) => issues.push({ path: `sandboxTool.${path}`, message });
  if (opts === null || typeof opts !== 'object') return [{ path: 'sandboxTool', message: `options must be an object, got ${describe(opts)}` }];
  const known = new Set(['name', 'description', 'languages', 'limits', 'bwrap']);
  for (const k of Object.keys(opts)) if (!known.has(k)) bad(k, `unknown option (known: ${[...known].join(', ')})`);
  if (opts.description !== undefined && typeof opts.description !== 'string') bad('description', `must be a string, got ${describe(opts.description)}`);
  if (opts.bwrap !== undefined && (typeof opts.bwrap !== 'string' || opts.bwrap === '')) bad('bwrap', `must be a non-empty path, got ${describe(opts.bwrap)}`);
  if (opts.languages !== undefined) {
    if (!Array.isArray(opts.languages) || opts.languages.length === 0) bad('languages', `must be a non-empty array of ${sandboxLanguages.join(', ')}`);
    else
      opts.languages.forEach((l, i) => {
        if (!sandboxLanguages.includes(l)) bad(`languages[${i}]`, `must be one of ${sandboxLanguages.join(', ')}, got ${describe(l)}`);
        else if (opts.languages?.indexOf(l) !== i) bad(`languages[${i}]`, `${l} is listed twice`);
      });
  }
  if (opts.limits !== undefined) {
    if (opts.limits === null || typeof opts.limits !== 'object') bad('limits', `must be an object, got ${describe(opts.limits)}`);
    else
      for (const [k, v] of Object.entries(opts.limits)) {
        const bounds = limitBounds[k as keyof SandboxLimits] as [number, number] | undefined;
        if (!bounds) bad(`limits.${k}`, `unknown limit (known: ${Object.keys(limitBounds).join(', ')})`);
        else if (!(Number.isInteger(v) && v >= bounds[0] && v <= bounds[1]))
          bad(`limits.${k}`, `must be an integer in [${bounds[0]}, ${bounds[1]}], got ${describe(v)}`);
      }
  }
  return issues;
}

/** The output as the agent reads it: exit status, then each non-empty stream. */
export function renderSandboxOutput(o: SandboxOutput): string {
  const parts = [`exit ${o.exitCode}`];
  // a stream's last newline is the separator's
  if (o.stdout) parts.push(`stdout:\n${o.stdout.replace(/\n$/, '')}`);
  if (o.stderr) parts.push(`stderr:\n${o.stderr.replace(/\n$/, '')}`);
  if (o.truncated) parts.push('(output truncated: past the sandbox limit)');
  return parts.join('\n');
}

/**
 * A tool that runs a snippet in a fresh bubblewrap sandbox per call: no network, a
 * read-only /usr, no home, no environment but PATH/HOME/LANG, a private scratch
 * directory, and the limits above. Where bubblewrap cannot create its namespaces the
 * call fails with a message saying why; the code is never run unconfined.
 */
export function sandboxTool(opts: SandboxToolOptions = {}): Tool<SandboxInput, SandboxOutput> {
  const issues = optionIssues(opts);
  if (issues.length > 0) throw new FieldError(issues);
  const languages = [...(opts.languages ?? sandboxLanguages)] as [SandboxLanguage, ...SandboxLanguage[]];
  const spec: SandboxSpec = Object.freeze({
    languages: Object.freeze(languages),
    limits: Object.freeze({ ...defaultSandboxLimits, ...opts.limits }),
    bwrap: opts.bwrap ?? 'bwrap',
  });
  const l = spec.limits;
  const tool = defineTool<SandboxInput, SandboxOutput>({
    name: opts.name ?? 'run_code',
    description:
      opts.description ??
      `Runs a ${languages.join(' or ')} snippet in a sandbox (no network, scratch directory /scratch, ` +
        `${l.wallMs} ms, ${l.memoryMb} MB, ${l.outputBytes} bytes of output); returns its exit code, stdout and stderr.`,
    input: z.object({ language: z.enum(languages).default(languages[0]), code: z.string().max(maxCodeChars) }),
    output: z.object({ exitCode: z.number().int(), stdout: z.string(), stderr: z.string(), truncated: z.boolean() }),
    // executeTool's own timer is the backstop: the runner stops the sandbox at wallMs and reports it itself
    timeoutMs: l.wallMs + 5_000,
    execute: () => Promise.reject(new Error('a sandbox tool runs only in a pool worker (executeTool runs it in bubblewrap)')),
    render: renderSandboxOutput,
  });
  Object.defineProperty(tool, specKey, { value: spec, enumerable: false });
  return tool;
}
