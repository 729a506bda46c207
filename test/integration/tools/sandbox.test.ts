/**
 * The code sandbox (agents/sandbox-tool.ts, activities/sandbox.ts) against its escape matrix,
 * with the real bwrap, python3 and sh, through executeTool (the path a pool worker runs):
 * a network socket, writes outside the scratch directory, the worker's environment and home,
 * a fork bomb, a memory bomb, an infinite loop, 100 MB of output and processes that try to
 * outlive their call. Each is contained, the agent gets a result or a tool error saying what
 * happened, and the process running the tool goes on. Where bwrap cannot run the tool refuses.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, describe, it } from 'node:test';
import type { ToolCallReply } from '../../../agents/episode';
import { sandboxTool, type SandboxOutput, type SandboxToolOptions } from '../../../agents/sandbox-tool';
import type { AnyTeam } from '../../../agents/team';
import { FieldError } from '../../../infra/issues';
import { executeTool } from '../../../activities/tools';
import { UserCodeThreads } from '../../../activities/training/user-code-threads';

const hasBwrap = spawnSync('bwrap', ['--version']).status === 0;
const skipNoBwrap = hasBwrap ? false : 'bubblewrap is not installed (Debian: apt-get install bubblewrap; .ci/run does)';

const teamOf = (opts: SandboxToolOptions = {}) => ({ agents: { coder: { tools: [sandboxTool(opts)] } } }) as unknown as AnyTeam;
let call = 0;
const request = (language: string, code: string) => ({
  tool: 'run_code',
  input: { language, code },
  episodeId: 'sandbox-test',
  turn: 0,
  call: call++,
  seed: 7,
});

async function run(team: AnyTeam, language: 'python' | 'shell', code: string): Promise<ToolCallReply & { ms: number }> {
  const t0 = Date.now();
  const reply = await executeTool(team, request(language, code));
  return { ...reply, ms: Date.now() - t0 };
}
const outputOf = (r: ToolCallReply): SandboxOutput => {
  assert.ok(r.ok, `expected a result, got the tool error ${(r as { error: string }).error}`);
  return r.output as SandboxOutput;
};
const errorOf = (r: ToolCallReply): string => {
  assert.ok(!r.ok, `expected a tool error, got ${JSON.stringify(r)}`);
  return r.error;
};

/** Command lines of the live processes of this machine (zombies have none). */
function commandLines(): string[] {
  const out: string[] = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (cmd) out.push(cmd.replaceAll('\0', ' ').trim());
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

/** Waits (briefly: the kernel ends a pid namespace's processes as its init exits) until no process matches. */
async function noProcessMatching(re: RegExp, ms = 2_000): Promise<string[]> {
  const until = Date.now() + ms;
  for (;;) {
    const left = commandLines().filter((c) => re.test(c));
    if (left.length === 0 || Date.now() > until) return left;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('sandbox tool options', () => {
  it('names the field of a bad option', () => {
    const bad = (opts: unknown, field: RegExp) =>
      assert.throws(
        () => sandboxTool(opts as SandboxToolOptions),
        (e: unknown) => e instanceof FieldError && field.test(e.message),
      );
    bad({ limits: { memoryMb: 0 } }, /sandboxTool\.limits\.memoryMb: must be an integer in \[16, /);
    bad({ limits: { wallMs: 1.5 } }, /sandboxTool\.limits\.wallMs/);
    bad({ limits: { cpuSecs: 1 } }, /sandboxTool\.limits\.cpuSecs: unknown limit/);
    bad({ languages: ['ruby'] }, /sandboxTool\.languages\[0\]: must be one of python, shell, got "ruby"/);
    bad({ languages: [] }, /sandboxTool\.languages: must be a non-empty array/);
    bad({ language: ['python'] }, /sandboxTool\.language: unknown option/);
    bad({ name: 'Run Code' }, /tools?\.?.*name: must match/);
  });

  it('takes only its enabled languages; the first is the default', async () => {
    const team = teamOf({ languages: ['shell'], bwrap: '/nonexistent/bwrap' });
    const r = await executeTool(team, { ...request('python', 'print(1)') });
    assert.match(errorOf(r), /invalid input: .*language/);
  });
});

describe('sandbox tool where bubblewrap cannot run', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandbox-refuse-'));
  const marker = path.join(dir, 'ran-unconfined');
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('refuses when bwrap is missing, and runs nothing', async () => {
    const r = await run(teamOf({ bwrap: path.join(dir, 'no-such-bwrap') }), 'shell', `touch ${marker}`);
    assert.match(errorOf(r), /run_code: bubblewrap \(.*no-such-bwrap\) is not installed here: install it .*never runs code unconfined/);
    assert.equal(fs.existsSync(marker), false);
  });

  it('refuses when bwrap cannot create namespaces, saying why, and runs nothing', async () => {
    // a bwrap as one fails where user namespaces are off
    const fake = path.join(dir, 'bwrap');
    fs.writeFileSync(fake, '#!/bin/sh\necho "bwrap: No permissions to create new namespace" >&2\nexit 1\n', { mode: 0o755 });
    fs.chmodSync(dir, 0o755); // the worker runs bwrap as nobody when it is root
    const team = teamOf({ bwrap: fake });
    for (let i = 0; i < 2; i++) {
      const r = await run(team, 'python', `open(${JSON.stringify(marker)}, "w")`);
      assert.match(errorOf(r), /cannot create its sandbox here: bwrap: No permissions to create new namespace\. The sandbox needs user namespaces/);
      assert.match(errorOf(r), /the snippet was not run \(the sandbox never runs code unconfined\)/);
    }
    assert.equal(fs.existsSync(marker), false);
  });

  it('a sandbox tool called outside a pool worker refuses too', async () => {
    const tool = sandboxTool();
    await assert.rejects(
      tool.execute({ language: 'shell', code: 'true' }, { episodeId: 'e', turn: 0, call: 0, seed: 0, signal: new AbortController().signal }),
      /runs only in a pool worker/,
    );
  });
});

describe('sandbox escape matrix', { skip: skipNoBwrap }, () => {
  const team = teamOf({ limits: { wallMs: 2_000, cpuSeconds: 5, memoryMb: 128, processes: 16, outputBytes: 4096 } });

  it('runs a snippet and returns exit code, stdout and stderr; the same snippet gives the same result', async () => {
    const code = 'import sys\nprint("hello", sum(range(10)))\nprint("warn", file=sys.stderr)\nsys.exit(3)';
    const a = await run(team, 'python', code);
    const b = await run(team, 'python', code);
    assert.deepEqual(outputOf(a), { exitCode: 3, stdout: 'hello 45\n', stderr: 'warn\n', truncated: false });
    assert.deepEqual(outputOf(b), outputOf(a));
    assert.ok(a.ok && a.rendered === 'exit 3\nstdout:\nhello 45\nstderr:\nwarn', a.ok ? a.rendered : '');
    const sh = outputOf(await run(team, 'shell', 'echo "$PWD $HOME $(id -u)"; echo data > f.txt; cat f.txt'));
    assert.equal(sh.stdout, '/scratch /scratch 1000\ndata\n');
  });

  it('concurrent calls each get their own sandbox and their own process count', async () => {
    // each fills most of its process limit and holds it while the others run
    const code = (i: number) => `for n in $(seq 12); do sleep 0.5 & done; echo call${i} > /scratch/who; sleep 0.2; cat /scratch/who; ls /scratch`;
    const replies = await Promise.all([0, 1, 2, 3].map((i) => run(team, 'shell', code(i))));
    replies.forEach((r, i) => assert.deepEqual(outputOf(r), { exitCode: 0, stdout: `call${i}\nsnippet\nwho\n`, stderr: '', truncated: false }));
  });

  it('no network: a socket to a port the test listens on never arrives, and only loopback exists', async () => {
    let connections = 0;
    const server = net.createServer((s) => (connections++, s.destroy()));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as net.AddressInfo).port;
    try {
      const code = [
        'import socket',
        'print(socket.if_nameindex())',
        'for host in ("127.0.0.1", "10.0.0.1", "1.1.1.1"):',
        '    try:',
        `        socket.create_connection((host, ${port}), timeout=1); print(host, "connected")`,
        '    except OSError as e:',
        '        print(host, type(e).__name__)',
      ].join('\n');
      const out = outputOf(await run(team, 'python', code));
      assert.equal(out.exitCode, 0, out.stderr);
      assert.equal(out.stdout.split('\n')[0], "[(1, 'lo')]");
      assert.doesNotMatch(out.stdout, /connected/);
      assert.equal(connections, 0);
    } finally {
      server.close();
    }
  });

  it('writes outside the scratch directory fail and leave nothing on the host', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandbox-outside-'));
    fs.chmodSync(dir, 0o777);
    const targets = [
      path.join(dir, 'escaped'),
      '/usr/sandbox-escaped',
      '/etc/sandbox-escaped',
      '/sandbox-escaped',
      '/dev/sandbox-escaped',
      path.join(os.homedir(), 'sandbox-escaped'),
    ];
    try {
      const code = targets.map((t) => `echo x > ${t} && echo "wrote ${t}"`).join('\n') + '\necho ok > /scratch/inside && cat /scratch/inside';
      const out = outputOf(await run(team, 'shell', code));
      assert.equal(out.stdout, 'ok\n');
      for (const t of targets) assert.equal(fs.existsSync(t), false, t);
      // and the scratch directory of one call is gone by the next
      assert.equal(outputOf(await run(team, 'shell', 'ls -A /scratch')).stdout, 'snippet\n');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the worker's environment and the files under its home are not visible", async () => {
    const secret = `s3cr3t-${process.pid}-${Date.now()}`;
    const secretFile = path.join(os.homedir(), `.sandbox-test-${process.pid}`);
    fs.writeFileSync(secretFile, secret);
    process.env.SECRET_TOKEN = secret;
    try {
      const code = `env; cat ${secretFile}; ls -A ${os.homedir()}; cat /proc/*/environ; cat /etc/passwd /etc/shadow`;
      const out = outputOf(await run(team, 'shell', code));
      assert.notEqual(out.exitCode, 0);
      assert.ok(!out.stdout.includes(secret) && !out.stderr.includes(secret));
      assert.doesNotMatch(out.stdout, /SECRET_TOKEN/);
      const names = new Set(
        out.stdout
          .split(/[\n\0]/)
          .filter((l) => /^[A-Z_]+=/.test(l))
          .map((l) => l.split('=')[0]),
      );
      assert.deepEqual([...names].sort(), ['HOME', 'LANG', 'PATH', 'PWD']); // env, and /proc/*/environ of the sandbox's own processes
      assert.match(out.stderr, /No such file or directory/);
    } finally {
      delete process.env.SECRET_TOKEN;
      fs.rmSync(secretFile, { force: true });
    }
  });

  it('a fork bomb is stopped by the process limit, and nothing of it is left', async () => {
    const r = await run(team, 'shell', 'f(){ f|f& }; f; sleep 0.5; echo survived');
    const out = outputOf(r);
    assert.match(out.stderr, /Cannot fork/);
    assert.equal(out.stdout, 'survived\n');
    assert.ok(r.ms < 5_000, `${r.ms} ms`);
    assert.deepEqual(await noProcessMatching(/\/scratch\/snippet/), []);
    // the worker goes on
    assert.equal(outputOf(await run(team, 'shell', 'echo next')).stdout, 'next\n');
  });

  it('a memory bomb fails its allocation at the memory limit', async () => {
    const before = process.memoryUsage().rss;
    const out = outputOf(await run(team, 'python', 'a = []\nwhile True: a.append(bytearray(10**7))'));
    assert.equal(out.exitCode, 1);
    assert.match(out.stderr, /MemoryError/);
    assert.ok(process.memoryUsage().rss - before < 64 * 1024 * 1024);
  });

  it('an infinite loop is killed at the wall-time limit, and one that spins at the CPU-time limit', async () => {
    const r = await run(team, 'python', 'print("looping", flush=True)\nwhile True: pass');
    assert.equal(errorOf(r), 'run_code: stopped at the wall-time limit (limits.wallMs = 2000 ms); stdout: looping\n');
    assert.ok(r.ms >= 2_000 && r.ms < 4_000, `${r.ms} ms`);
    const cpu = await run(teamOf({ limits: { wallMs: 10_000, cpuSeconds: 1 } }), 'shell', 'while :; do :; done');
    assert.match(errorOf(cpu), /^run_code: stopped at the CPU-time limit \(limits\.cpuSeconds = 1 s\)/);
    assert.ok(cpu.ms < 5_000, `${cpu.ms} ms`);
    assert.deepEqual(await noProcessMatching(/\/scratch\/snippet/), []);
  });

  it('100 MB of output is cut at the output limit and never held in memory', async () => {
    const before = process.memoryUsage().rss;
    const code = 'import sys\nchunk = b"x" * (1 << 20)\nfor _ in range(100): sys.stdout.buffer.write(chunk)\nprint("done", file=sys.stderr)';
    const r = await run(team, 'python', code);
    const out = outputOf(r);
    assert.equal(out.exitCode, 0);
    assert.equal(out.stdout, 'x'.repeat(4096));
    assert.equal(out.stderr, 'done\n');
    assert.equal(out.truncated, true);
    assert.ok(r.ok && r.rendered.endsWith('(output truncated: past the sandbox limit)'));
    assert.ok(process.memoryUsage().rss - before < 64 * 1024 * 1024, `rss grew ${process.memoryUsage().rss - before} bytes`);
  });

  it('processes started in the background do not outlive their call', async () => {
    const code = 'sleep 1001 & setsid sleep 1002 & nohup sleep 1003 >/dev/null 2>&1 &\n(trap "" HUP TERM; sleep 1004) &\necho started';
    const r = await run(team, 'shell', code);
    assert.equal(outputOf(r).stdout, 'started\n');
    assert.ok(r.ms < 2_000, `${r.ms} ms`);
    assert.deepEqual(await noProcessMatching(/^sleep 100[1-4]$/), []);
    // the classic daemon: fork, setsid, fork again, the first child exits
    const py = 'import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1005)\n    os._exit(0)\nprint("parent")';
    assert.equal(outputOf(await run(team, 'python', py)).stdout, 'parent\n');
    assert.deepEqual(await noProcessMatching(/\/scratch\/snippet/), []);
  });
  it('nothing outlives a worker killed mid-call', async () => {
    const seconds = String(1000 + (process.pid % 1000)); // a sleep no other test runs
    const worker = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, 'sandbox-orphan.ts'), seconds], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => {
      worker.stdout.on('data', (d: Buffer) => d.toString().includes('running') && resolve());
      worker.on('exit', () => resolve()); // then the check below says the snippet did not run
    });
    const sleeping = new RegExp(`^sleep ${seconds}$`);
    assert.equal(commandLines().filter((c) => sleeping.test(c)).length, 1); // the snippet runs
    worker.kill('SIGKILL');
    assert.deepEqual(await noProcessMatching(sleeping), []);
  });
});

describe('sandbox tool in a user code thread', { skip: skipNoBwrap }, () => {
  const threads = new UserCodeThreads(path.join(__dirname, 'sandbox-thread.ts'), 1);
  const team = teamOf({ limits: { wallMs: 1_000 } }); // the thread's team (sandbox-thread.ts) has the same tool
  const ref = { team: 'sandbox-test' } as Parameters<UserCodeThreads['callTool']>[1];
  after(() => threads.close());

  it('answers results and tool errors, and the thread goes on', async () => {
    const ok = await threads.callTool(team, ref, request('python', 'print(6 * 7)'));
    assert.equal(outputOf(ok).stdout, '42\n');
    const stopped = await threads.callTool(team, ref, request('shell', 'sleep 100'));
    assert.equal(errorOf(stopped), 'run_code: stopped at the wall-time limit (limits.wallMs = 1000 ms)');
    assert.equal((stopped as { fault?: string }).fault, undefined); // a tool error, not a stopped thread
    const again = await threads.callTool(team, ref, request('shell', 'echo again'));
    assert.equal(outputOf(again).stdout, 'again\n');
    assert.deepEqual(await noProcessMatching(/^sleep 100$/), []);
  });
});
