/**
 * Running a tool call: validated input in, validated output out, with the
 * tool's time limit. A tool that throws, times out or returns output that
 * fails its schema becomes a tool error (data for the trajectory), not a crash; but a failure its
 * team says fails the run (ToolFailsRun, a timeout of a tool with timeoutFailsRun) is answered
 * with `failsRun`, which whoever holds the reply turns into the run's failure (failRunOn).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ToolCallReply, ToolCallRequest } from '../agents/episode';
import type { AnyTeam } from '../agents/team';
import { sandboxSpecOf } from '../agents/sandbox-tool';
import { isToolFailsRun, runtimeHints, zodMessage, type Tool, type ToolContext } from '../agents/tool';
import { runSandbox } from './sandbox';

/** executeTool's own time limit, as opposed to what a tool throws. */
class TimedOut extends Error {}

/** A tool's execute as the worker runs it: sandbox tools run here in bubblewrap (their own execute is a stub). */
function executeOf(tool: Tool): (input: unknown, ctx: ToolContext) => Promise<unknown> {
  const spec = sandboxSpecOf(tool);
  return spec ? (input, ctx) => runSandbox(spec, input as Parameters<typeof runSandbox>[1], ctx) : (input, ctx) => tool.execute(input, ctx);
}

export async function executeTool(team: AnyTeam, req: ToolCallRequest, cancelled?: AbortSignal): Promise<ToolCallReply> {
  const tool = Object.values(team.agents)
    .flatMap((a) => a.tools)
    .find((t) => t.name === req.tool);
  const started = performance.now();
  const elapsed = () => performance.now() - started;
  if (!tool) return { ok: false, error: `unknown tool ${JSON.stringify(req.tool)}`, durationMs: 0 };
  const input = tool.input.safeParse(req.input);
  if (!input.success) return { ok: false, error: `${tool.name}: invalid input: ${zodMessage(input.error, 'input')}`, durationMs: 0 };

  const controller = new AbortController();
  const onCancel = () => controller.abort(cancelled?.reason);
  cancelled?.addEventListener('abort', onCancel);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort(new Error('timeout'));
      reject(new TimedOut(`${tool.name}: timed out after ${tool.timeoutMs} ms`));
    }, tool.timeoutMs);
  });
  try {
    const raw = await Promise.race([
      executeOf(tool)(input.data, { episodeId: req.episodeId, turn: req.turn, call: req.call, seed: req.seed, signal: controller.signal }),
      timeout,
    ]);
    const output = tool.output.safeParse(raw);
    if (!output.success) return { ok: false, error: `${tool.name}: invalid output: ${zodMessage(output.error, 'output')}`, durationMs: elapsed() };
    return { ok: true, output: output.data, rendered: tool.render(output.data), durationMs: elapsed() };
  } catch (e) {
    if (cancelled?.aborted) throw e; // cancellation of the activity is not a tool error
    const message = (e as Error)?.message ?? String(e);
    const error = message.startsWith(`${tool.name}:`) ? message : `${tool.name}: ${message}`;
    const timeoutFailsRun = runtimeHints(tool).timeoutFailsRun;
    const failsRun = isToolFailsRun(e) ? e.runMessage : e instanceof TimedOut && timeoutFailsRun ? timeoutFailsRun(tool.timeoutMs) : undefined;
    return { ok: false, error, durationMs: elapsed(), ...(failsRun !== undefined ? { failsRun } : {}) };
  } finally {
    clearTimeout(timer);
    cancelled?.removeEventListener('abort', onCancel);
  }
}

/** The ApplicationFailure type of a run failed by a tool (ToolCallReply.failsRun). */
export const TOOL_FAILS_RUN = 'ToolFailsRun';

/**
 * The reply, unless its team says it fails the run: then a non-retryable failure with the reply's
 * message, which fails the activity that holds it (a durable episode's tool call, a batched
 * rollout), and with it the run, on the first attempt.
 */
export function failRunOn(reply: ToolCallReply): ToolCallReply {
  if (!reply.ok && reply.failsRun !== undefined) throw ApplicationFailure.nonRetryable(reply.failsRun, TOOL_FAILS_RUN);
  return reply;
}
