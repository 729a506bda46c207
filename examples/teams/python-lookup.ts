/**
 * `python-lookup`: agent code in Python (python-lookup.py), trained through the
 * gateway (gateway/). The episode function starts one Python process per
 * episode with the agent's session in OPENAI_BASE_URL / OPENAI_API_KEY, as
 * the OpenAI Python client reads them; the process calls the gateway over
 * plain HTTP with a `lookup` tool, runs the tool calls it gets back, and prints
 * its answer as one JSON line, which the episode scores. The same task,
 * tokenizer, chat template, one-token replies and reward as `ai-sdk-lookup`:
 * after `U?>` the policy must call the tool, after `T<digit>>` answer the
 * digit, and calling the tool is rewarded on its own too.
 *
 * The interpreter: TROUPE_PYTHON, else Debian's /usr/bin/python3 when present,
 * else `python3` on the PATH. Batched rollout only (the gateway serves batched
 * episodes).
 */
import { defineTeam } from 'troupe';
import { lookupGame, lookupTasks, type LookupOutcome } from './ai-sdk-lookup';

/**
 * Runs the Python agent to its end. Node's modules are loaded here, where the episode runs
 * (bundled teams are also compiled into the workflow bundle, which has no child processes).
 */
async function runAgent(session: { baseURL: string; apiKey: string }, secret: number): Promise<LookupOutcome> {
  const [{ execFile }, fs, path] = await Promise.all([
    import(/* webpackIgnore: true */ 'node:child_process'),
    import(/* webpackIgnore: true */ 'node:fs'),
    import(/* webpackIgnore: true */ 'node:path'),
  ]);
  const python = process.env.TROUPE_PYTHON ?? (fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
  const script = path.join(__dirname, 'python-lookup.py');
  // only what the agent needs: a proxy variable of the parent's would send requests' loopback calls to the proxy
  const env = { PATH: process.env.PATH ?? '', OPENAI_BASE_URL: session.baseURL, OPENAI_API_KEY: session.apiKey, LOOKUP_SECRET: String(secret) };
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(python, [script], { env, timeout: 300_000 }, (err, out, errText) =>
      err ? reject(new Error(`${python} ${script}: ${errText.trim() || err.message}`)) : resolve(out),
    ),
  );
  const line = stdout.trim().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(line) as LookupOutcome;
  } catch {
    throw new Error(`${script} printed no JSON outcome: ${JSON.stringify(stdout.slice(-200))}`);
  }
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
