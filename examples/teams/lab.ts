/**
 * `lab`: a solver that runs a Python snippet in the code sandbox and a checker that asks an
 * MCP server whether the solver got it right: the worked example of both tool kinds
 * (`sandboxTool`, `mcpServer`) in one team.
 *
 * Made to be learnable from a random initialization by the built-in tiny policy, as `math` is:
 * each tool call is ONE token of an 18-piece vocabulary. The solver reads "12*7" and typing '='
 * runs `print(12*7)` in a fresh bubblewrap sandbox (the syntax builds the snippet from the
 * expression on the display; the sandbox really runs it); its output, rendered by the sandbox
 * tool as "exit 0\nstdout:\n84", is one vocabulary piece plus the digits. The checker reads
 * "12*7=84?" and typing '!' calls the MCP server's `check` tool (lab-mcp-server.mjs, started
 * with this Node binary), which answers 'Y' or 'N'. Each turn is one sampled token, and a
 * product past 9 is out of reach of a one-digit guess, so the solver must learn the sandbox
 * key; while the solver is still often wrong, only the checker's tool call judges every answer
 * right, so it learns the MCP key.
 *
 * Needs `bwrap` on the pool workers (Debian: apt-get install bubblewrap); where it cannot run,
 * every sandbox call is a tool error ('E') and the team cannot succeed.
 */
import { agent, defineTeam, generatedTasks, mcpServer, sandboxTool, tinyLM, vocabTokenizer, type ToolSyntax } from 'troupe';

export interface LabTask {
  a: number;
  b: number;
}

export interface LabOutcome {
  answer: number | null;
  verdict: string;
}

export interface LabOptions {
  /** Operands are drawn from 0..maxOperand (at most 99). */
  maxOperand?: number;
  /** Multiplier of the checker's reward relative to the solver's. */
  checkerScale?: number;
  /** What a failure of the checker's MCP server does: a tool error the checker reads (default), or fail the run. */
  checkerOnError?: 'tool-error' | 'fail-run';
}

/** What the sandbox tool writes for a snippet that printed and exited 0: one piece, so a result is a few tokens. */
export const sandboxPrefix = 'exit 0\nstdout:\n';

export const tokenizer = vocabTokenizer([...'0123456789*=?!YNE', sandboxPrefix]);

/**
 * The sandbox: Python only, small limits (a snippet is one print). The CPU second is the real
 * bound; the wall-clock limit is generous because it counts waiting for a core: a step starts
 * 128 sandboxes at once, about 20 ms of CPU each, and on 2 cores the last one waits seconds
 * (500 at once with wallMs 3000 lost 495 of them to the limit, measured here).
 */
export const runCode = sandboxTool({
  name: 'run_code',
  languages: ['python'],
  limits: { wallMs: 30_000, cpuSeconds: 1, memoryMb: 128, processes: 4, outputBytes: 64, scratchMb: 1 },
});

/**
 * What tests give the server (it gets only the variables given it): where it appends a line per
 * call (a test counts the calls), and whether `check` crashes the server (a test of checkerOnError).
 */
const testEnv = Object.fromEntries(
  (['LAB_MCP_CALL_LOG', 'LAB_MCP_CRASH'] as const).flatMap((k) => {
    const v = typeof process === 'undefined' ? undefined : process.env[k];
    return v ? [[k, v]] : [];
  }),
);

const checkerOptions = {
  name: 'lab',
  // this module is also bundled into the workflow sandbox (durable episodes), which has no node:path and
  // runs no tool: plain strings here, guarded, and the server only ever starts where tools run
  command: typeof process === 'undefined' ? 'node' : process.execPath,
  args: [`${typeof __dirname === 'string' ? __dirname : '.'}/lab-mcp-server.mjs`],
  ...(Object.keys(testEnv).length > 0 ? { env: testEnv } : {}),
  tools: ['check'],
  timeoutMs: 10_000,
};

/** The checker's service: an MCP server with one tool, `check` (lab-mcp-server.mjs). */
export const checkerServer = mcpServer(checkerOptions);
/** The same service for `checkerOnError: 'fail-run'`: a failure of the server fails the run. */
export const failingCheckerServer = mcpServer({ ...checkerOptions, onError: 'fail-run' });

/**
 * One-key tool syntax: '=' after "a*b" runs `print(a*b)` in the sandbox; '!' after "a*b=c?" asks
 * the MCP server to check c. Anything else before a key is a malformed call, answered 'E'.
 */
export const labSyntax: ToolSyntax = {
  name: 'lab-keys',
  triggers: ['=', '!'],
  parse(visible) {
    if (visible.endsWith('=')) {
      const m = /(?:^|[^\d])(\d{1,2})\*(\d{1,2})=$/.exec(visible);
      if (!m) return { tool: 'run_code', error: 'run_code: expected a*b before =' };
      return { tool: 'run_code', input: { language: 'python', code: `print(${Number(m[1])}*${Number(m[2])})` } };
    }
    if (visible.endsWith('!')) {
      const m = /(?:^|[^\d])(\d{1,2})\*(\d{1,2})=(\d{0,4})\?!$/.exec(visible);
      if (!m) return { tool: 'check', error: 'check: expected a*b=c? before !' };
      return { tool: 'check', input: { expr: `${Number(m[1])}*${Number(m[2])}`, answer: m[3]! } };
    }
    return null;
  },
  renderError: () => 'E',
};

/** The product the solver answered: the sandbox's stdout if it ran the snippet, else the digits it wrote. */
export function solverAnswer(turn: { reply: string; toolCalls: ReadonlyArray<{ tool: string; output?: unknown }> }): number | null {
  const ran = [...turn.toolCalls].reverse().find((c) => c.tool === 'run_code' && c.output !== undefined);
  if (ran) {
    const out = ran.output as { exitCode: number; stdout: string };
    return out.exitCode === 0 && /^\d{1,4}\n?$/.test(out.stdout) ? Number(out.stdout) : null;
  }
  return /^\d{1,4}$/.test(turn.reply) ? Number(turn.reply) : null;
}

/** The checker's verdict: the MCP server's answer if it asked, else the first character it wrote. */
export function checkerVerdict(turn: { reply: string; toolCalls: ReadonlyArray<{ tool: string; output?: unknown }> }): string {
  const asked = [...turn.toolCalls].reverse().find((c) => c.tool === 'check' && c.output !== undefined);
  if (asked) {
    const content = (asked.output as { content: Array<{ type: string; text?: string }> }).content;
    return content.find((c) => c.type === 'text')?.text ?? '';
  }
  return Array.from(turn.reply)[0] ?? '';
}

export function labTeam(options: LabOptions = {}) {
  const maxOperand = Math.min(99, options.maxOperand ?? 49);
  const scale = options.checkerScale ?? 10;
  const checker = options.checkerOnError === 'fail-run' ? failingCheckerServer : checkerServer;
  // the same tiny policy and optimizer as math's (lr 0.02 from scratch, an entropy bonus that keeps every verdict sampled)
  const policy = tinyLM({ tokenizer, contextWindow: 8, embedDim: 16, hiddenDim: 64, optimizer: { lr: 0.02, entropyCoef: 0.01 } });
  return defineTeam({
    name: 'lab',
    description: 'A solver that runs Python in the code sandbox and a checker that calls an MCP tool; each call is one token.',
    tokenizer,
    models: { policy },
    toolSyntax: labSyntax,
    agents: {
      // one token a turn: the tool key (its output follows, unsampled) or a one-token answer; a second
      // key would pass maxToolCalls and truncate the episode
      solver: agent({ model: 'policy', tools: [runCode], maxTokens: 1, maxToolCalls: 1 }),
      checker: agent({ model: 'policy', tools: [...checker.tools], maxTokens: 1, maxToolCalls: 1 }),
    },
    tasks: generatedTasks<LabTask>({
      seed: 11,
      count: (maxOperand + 1) ** 2,
      // 5 % held out (136 of 2,500): an eval runs them all at once, and so about as many sandboxes as a step (128)
      evalFraction: 0.05,
      make: (_random, i) => {
        const a = Math.floor(i / (maxOperand + 1));
        const b = i % (maxOperand + 1);
        return { id: `${a}*${b}`, data: { a, b } };
      },
    }),
    async episode({ task, agents }): Promise<LabOutcome> {
      const question = `${task.a}*${task.b}`;
      const solution = await agents.solver.act(question);
      const answer = solverAnswer(solution);
      const check = await agents.checker.act(`${question}=${answer ?? ''}?`, { after: [solution] });
      return { answer, verdict: checkerVerdict(check) };
    },
    rewards: {
      solver: ({ task, outcome }) => ({ correct: outcome?.answer === task.a * task.b ? 1 : 0 }),
      checker: ({ task, outcome }) => {
        const right = outcome?.answer === task.a * task.b;
        const judged = (outcome?.verdict === 'Y' && right) || (outcome?.verdict === 'N' && !right);
        return { judged: judged ? scale : 0 };
      },
    },
    success: ({ task, outcome }) => outcome?.answer === task.a * task.b && outcome.verdict === 'Y',
  });
}

export default labTeam;
