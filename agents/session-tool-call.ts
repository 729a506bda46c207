/**
 * A tool call the gateway makes for an agent's code (its MCP server, gateway/mcp.ts): run as
 * act() runs one (`EpisodeIO.callTool`: the tool's time limit, the sandbox, the MCP server, its
 * errors as tool errors), seeded by the call's index among the episode's gateway calls, and
 * recorded with the agent's last turn (the one whose reply asked for it), if it has one. A
 * journaled reply (an earlier attempt's) is recorded and given instead of calling the tool.
 */
import type { SessionToolRequest, ToolCallReply } from './episode';
import { deriveSeed } from './seed';
import type { RunningEpisode } from './turn';

export async function sessionToolCall(ep: RunningEpisode, role: string, req: SessionToolRequest, answered?: ToolCallReply): Promise<ToolCallReply> {
  const { input, io, turns, lastTurnOf } = ep;
  const at = lastTurnOf.get(role);
  const turn = at === undefined ? undefined : turns[at];
  const reply =
    answered ??
    (await io.callTool({
      tool: req.tool,
      input: req.input,
      episodeId: input.episodeId,
      turn: at ?? -1,
      call: req.call,
      seed: deriveSeed(input.seed, 'gateway-call', req.call),
    }));
  if (turn) {
    const index = turn.toolCalls.length;
    const base = { index, tool: req.tool, input: req.input, durationMs: reply.durationMs };
    turn.toolCalls.push(reply.ok ? { ...base, output: reply.output } : { ...base, error: reply.error });
  }
  return reply;
}
