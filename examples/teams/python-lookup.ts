/**
 * `python-lookup`: agent code in Python (python-lookup.py), trained through the
 * gateway (gateway/). The Python code runs as an agent service: one process
 * per episode thread, started on first use, serving every episode of that
 * thread at once. Each episode sends it the agent's session (base URL and
 * key, what the OpenAI Python client reads from OPENAI_BASE_URL /
 * OPENAI_API_KEY) and the secret; the service calls the gateway over plain
 * HTTP with a `lookup` tool, runs the tool calls it gets back, and answers
 * with the outcome, which the episode scores. (One process per episode cost
 * about 0.15 s of CPU each to start Python and import requests: 38 CPU-minutes
 * for a run of 60 steps x 256 episodes.) The same task, tokenizer, chat
 * template, one-token replies, reward and run defaults as `ai-sdk-lookup`:
 * after `U?>` the policy must call the tool, after `T<digit>>` answer the
 * digit, and calling the tool is rewarded on its own too.
 *
 * The interpreter: TROUPE_PYTHON, else Debian's /usr/bin/python3 when present,
 * else `python3` on the PATH. Batched rollout only (the gateway serves batched
 * episodes).
 */
import { defineTeam } from 'troupe';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { lookupGame, lookupTasks, type LookupOutcome } from './ai-sdk-lookup';

interface Pending {
  resolve(outcome: LookupOutcome): void;
  reject(error: Error): void;
}

/** This thread's agent service, while it runs. */
let service: { child: ChildProcessWithoutNullStreams; pending: Map<number, Pending>; stderr: string } | undefined;
let nextId = 0;

/**
 * The agent service, started on first use. It exits when its stdin closes, so it ends with this
 * thread or process however they end. Node's modules are loaded here, where the episode runs
 * (bundled teams are also compiled into the workflow bundle, which has no child processes).
 */
async function agentService() {
  if (service) return service;
  const [{ spawn }, fs, path] = await Promise.all([
    import(/* webpackIgnore: true */ 'node:child_process'),
    import(/* webpackIgnore: true */ 'node:fs'),
    import(/* webpackIgnore: true */ 'node:path'),
  ]);
  if (service) return service;
  const python = process.env.TROUPE_PYTHON ?? (fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
  const script = path.join(__dirname, 'python-lookup.py');
  // only what the agent needs: a proxy variable of the parent's would send requests' loopback calls to the proxy
  const child = spawn(python, [script], { env: { PATH: process.env.PATH ?? '' } });
  const s = { child, pending: new Map<number, Pending>(), stderr: '' };
  service = s;
  let buffered = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      let answer: { id: number; outcome?: LookupOutcome; error?: string };
      try {
        answer = JSON.parse(line);
      } catch {
        s.stderr += `\nprinted a line that is not JSON: ${JSON.stringify(line.slice(0, 200))}`;
        child.kill('SIGKILL'); // its exit fails what is pending; the next episode starts a fresh one
        return;
      }
      const p = s.pending.get(answer.id);
      s.pending.delete(answer.id);
      if (answer.error !== undefined) p?.reject(new Error(`${script}: ${answer.error}`));
      else p?.resolve(answer.outcome!);
    }
    idle(s);
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (s.stderr = (s.stderr + chunk).slice(-2000)));
  const gone = (why: string) => {
    if (service === s) service = undefined;
    for (const p of s.pending.values()) p.reject(new Error(`${python} ${script} ${why}: ${s.stderr.trim()}`));
    s.pending.clear();
  };
  child.stdin.on('error', () => undefined); // a write to a service that died: its exit fails what is pending
  child.on('error', (e) => gone(`failed: ${e.message}`));
  child.on('exit', (code, signal) => gone(`exited (${signal ?? code})`));
  return s;
}

/** An idle service does not keep this thread or process alive (its stdin closing ends it). */
function idle(s: NonNullable<typeof service>) {
  const busy = s.pending.size > 0;
  for (const handle of [s.child, s.child.stdout, s.child.stderr, s.child.stdin] as unknown as { ref(): void; unref(): void }[])
    if (busy) handle.ref();
    else handle.unref();
}

/** Runs the Python agent for one episode to its end. */
async function runAgent(session: { baseURL: string; apiKey: string }, secret: number): Promise<LookupOutcome> {
  const s = await agentService();
  const id = nextId++;
  const outcome = new Promise<LookupOutcome>((resolve, reject) => s.pending.set(id, { resolve, reject }));
  idle(s);
  s.child.stdin.write(JSON.stringify({ id, base_url: session.baseURL, api_key: session.apiKey, secret }) + '\n');
  return outcome;
}

export function pythonLookupTeam() {
  return defineTeam({
    name: 'python-lookup',
    description: 'Python agent code over plain HTTP, trained through the gateway: call the lookup tool, answer with its digit.',
    ...lookupGame(),
    tasks: lookupTasks(9),
    episode: ({ task, agents }) => runAgent(agents.solver.openai, task.secret),
  });
}

export default pythonLookupTeam;
