/**
 * Running one sandbox tool call (agents/sandbox-tool.ts) in bubblewrap: a fresh set of
 * namespaces per call (user, pid, net, ipc, uts, mount), a read-only /usr, an in-memory
 * scratch directory, no home and no environment, with rlimits set inside (prlimit) and a
 * wall-clock timer outside. Killing bwrap kills the whole sandbox: its namespace init
 * dies with it (--die-with-parent) and the kernel ends every process of a pid namespace
 * whose init ends, so nothing the snippet started outlives the call.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { SandboxInput, SandboxLanguage, SandboxOutput, SandboxSpec } from '../agents/sandbox-tool';
import type { ToolContext } from '../agents/tool';

/** The interpreter of each language, inside the sandbox (where /usr is the host's, read-only). */
const interpreters: Record<SandboxLanguage, readonly string[]> = {
  python: ['/usr/bin/python3', '-I', '-B'], // -I: no user site-packages, no PYTHON* variables
  shell: ['/bin/sh'],
};

/** Where the snippet lands in the sandbox, and the sandbox's working directory. */
const scratch = '/scratch';

/** The unprivileged user bwrap runs as when the worker is root: root is exempt from RLIMIT_NPROC, and nobody owns nothing of the host. */
const nobody = 65534;

/** Shown in the tool error when a limit stopped the call: enough to see what the snippet was doing. */
const errorExcerptChars = 2_000;

/** The host's top-level system paths: merged-/usr systems have them as links into /usr, older ones as folders. */
function systemPathArgs(): string[] {
  const args: string[] = [];
  for (const p of ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32']) {
    let st: fs.Stats;
    try {
      st = fs.lstatSync(p);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(p), p);
    else if (st.isDirectory()) args.push('--ro-bind', p, p);
  }
  return args;
}

/** bwrap's arguments for one call; `command` runs in the sandbox. */
export function bwrapArgs(spec: SandboxSpec, command: readonly string[]): string[] {
  const l = spec.limits;
  const mb = 1024 * 1024;
  return [
    '--unshare-all', // user, pid, net (only a loopback of its own), ipc, uts, cgroup
    '--unshare-user', // required, not "try": the process limit counts per user namespace
    '--disable-userns', // and the snippet may not make further ones
    '--die-with-parent',
    '--new-session', // no ioctl(TIOCSTI) into a terminal the worker holds
    '--uid', '1000', '--gid', '1000',
    '--ro-bind', '/usr', '/usr',
    ...systemPathArgs(),
    // what the dynamic linker and python read from /etc; nothing else of it (no passwd, no keys)
    '--ro-bind-try', '/etc/ld.so.cache', '/etc/ld.so.cache',
    '--ro-bind-try', '/etc/alternatives', '/etc/alternatives',
    '--proc', '/proc',
    // every writable place is a tmpfs of at most scratchMb (memory the host gives): /dev's own is unbounded, so read-only
    '--dev', '/dev',
    '--size', String(l.scratchMb * mb), '--tmpfs', '/dev/shm',
    '--remount-ro', '/dev',
    '--size', String(l.scratchMb * mb), '--tmpfs', '/tmp',
    '--size', String(l.scratchMb * mb), '--tmpfs', scratch,
    '--remount-ro', '/', // bwrap's root, where the mount points above were made
    '--file', '3', `${scratch}/snippet`,
    '--chdir', scratch,
    '--clearenv',
    '--setenv', 'PATH', '/usr/bin:/bin',
    '--setenv', 'HOME', scratch,
    '--setenv', 'LANG', 'C.UTF-8',
    '--',
    '/usr/bin/prlimit',
    `--cpu=${l.cpuSeconds}:${l.cpuSeconds + 1}`, // soft: SIGXCPU; hard, a second later: SIGKILL for a snippet that ignores it
    `--as=${l.memoryMb * mb}`,
    `--nproc=${l.processes}`,
    `--fsize=${l.scratchMb * mb}`,
    '--core=0',
    '--nofile=256',
    '--',
    ...command,
  ]; // prettier-ignore
}

/** The bwrap binary: a path as given, a bare name looked up on the worker's PATH. */
function resolveBinary(name: string): string | undefined {
  if (name.includes('/')) return fs.existsSync(name) ? path.resolve(name) : undefined;
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return undefined;
}

const asRoot = () => process.getuid?.() === 0;
const spawnUser = () => (asRoot() ? { uid: nobody, gid: nobody } : {});

/** Cached per bwrap binary: the first call checks the sandbox works, every later call reuses the answer. */
const probes = new Map<string, { bin: string } | { error: string }>();

/**
 * Whether bwrap can build this sandbox here: runs `true` in it. Undefined when it can, else
 * why not and what to do. Synchronous and cached: it runs once per worker thread.
 */
export function sandboxProblem(spec: SandboxSpec): string | undefined {
  let probe = probes.get(spec.bwrap);
  if (!probe) {
    const bin = resolveBinary(spec.bwrap);
    if (!bin) probe = { error: `bubblewrap (${spec.bwrap}) is not installed here: install it (Debian: apt-get install bubblewrap)` };
    else {
      const empty = fs.openSync('/dev/null', 'r'); // the snippet's fd 3: an empty file
      let r: ReturnType<typeof spawnSync>;
      try {
        r = spawnSync(bin, bwrapArgs(spec, ['/bin/true']), { stdio: ['ignore', 'ignore', 'pipe', empty], env: {}, timeout: 10_000, ...spawnUser() });
      } finally {
        fs.closeSync(empty);
      }
      const why = (r.error?.message ?? r.stderr?.toString().trim()) || `exit ${r.status ?? r.signal}`;
      probe =
        r.status === 0
          ? { bin }
          : {
              error:
                `bubblewrap (${bin}) cannot create its sandbox here: ${why}. The sandbox needs user namespaces ` +
                `(sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; in a container, one allowed to create them)`,
            };
    }
    probes.set(spec.bwrap, probe);
  }
  return 'error' in probe ? probe.error : undefined;
}

/** The first `limit` bytes of a stream, read as they come so the rest never piles up. */
class Capped {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  truncated = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    const room = this.limit - this.kept;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(Buffer.from(part)); // a copy: a subarray would keep the whole chunk alive
    this.kept += part.length;
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

const excerpt = (s: string) => (s.length > errorExcerptChars ? `${s.slice(0, errorExcerptChars)}…` : s);

/** SIGXCPU: what the soft RLIMIT_CPU sends; bwrap reports a signal N as exit 128 + N. */
const exitOnCpuLimit = 128 + 24;

/**
 * Runs one snippet. Resolves with the result when the snippet ends on its own; rejects
 * (a tool error, via executeTool) when bubblewrap cannot run here, when a limit stopped
 * the snippet (wall time, CPU time), or when the call was cancelled.
 */
export async function runSandbox(spec: SandboxSpec, input: SandboxInput, ctx: Pick<ToolContext, 'signal'>): Promise<SandboxOutput> {
  const problem = sandboxProblem(spec);
  if (problem) throw new Error(`${problem}; the snippet was not run (the sandbox never runs code unconfined)`);
  const probe = probes.get(spec.bwrap) as { bin: string };
  if (!spec.languages.includes(input.language)) throw new Error(`language ${input.language} is not enabled (enabled: ${spec.languages.join(', ')})`);
  ctx.signal.throwIfAborted();

  const command = [...interpreters[input.language], `${scratch}/snippet`];
  // detached: bwrap leads its own process group, so one kill reaches it and its monitor child
  const child = spawn(probe.bin, bwrapArgs(spec, command), { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: {}, detached: true, ...spawnUser() });
  const stdout = new Capped(spec.limits.outputBytes);
  const stderr = new Capped(spec.limits.outputBytes);
  child.stdout?.on('data', (c: Buffer) => stdout.push(c));
  child.stderr?.on('data', (c: Buffer) => stderr.push(c));
  const codeIn = child.stdio[3] as NodeJS.WritableStream | null;
  codeIn?.on('error', () => {}); // bwrap failing early closes the pipe; its exit status says why
  codeIn?.end(input.code);

  let stopped: string | undefined;
  let exited = false;
  child.on('exit', () => (exited = true));
  const kill = (why: string) => {
    if (exited) return; // its group may be gone and its number reused
    stopped ??= why;
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  const timer = setTimeout(() => kill(`stopped at the wall-time limit (limits.wallMs = ${spec.limits.wallMs} ms)`), spec.limits.wallMs);
  const onAbort = () => kill('cancelled');
  ctx.signal.addEventListener('abort', onAbort);
  try {
    const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code, signal) => resolve({ code, signal }));
    });
    if (ctx.signal.aborted) throw ctx.signal.reason instanceof Error ? ctx.signal.reason : new Error('cancelled');
    const out = { stdout: stdout.text(), stderr: stderr.text() };
    const shown = `${out.stdout ? `; stdout: ${excerpt(out.stdout)}` : ''}${out.stderr ? `; stderr: ${excerpt(out.stderr)}` : ''}`;
    if (stopped) throw new Error(`${stopped}${shown}`);
    if (exit.code === exitOnCpuLimit) throw new Error(`stopped at the CPU-time limit (limits.cpuSeconds = ${spec.limits.cpuSeconds} s)${shown}`);
    if (exit.code === null) throw new Error(`bubblewrap ended on ${exit.signal}${shown}`);
    return { exitCode: exit.code, ...out, truncated: stdout.truncated || stderr.truncated };
  } finally {
    clearTimeout(timer);
    ctx.signal.removeEventListener('abort', onAbort);
    kill('ended'); // the call is over: nothing of it may stay (a no-op when bwrap has exited)
  }
}
