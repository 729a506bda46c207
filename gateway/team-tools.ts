/**
 * One agent's team tools through the gateway (served as an MCP server, mcp.ts): listed as the
 * function definitions act() puts in the chat template (each tool's JSON schema: a TypeScript
 * tool's zod input, an MCP tool's declared `inputSchema`), and called as act() calls them
 * (EpisodeTurns.callTool). A call is numbered in the episode's gateway calls, with its turns,
 * and journaled with the tool's answer before the agent's code sees it: a retried episode gets
 * the journaled answer without the tool being called again, and a call that differs from the
 * journaled one at its index ends the attempt, as a diverging turn does (journal.ts).
 */
import type { EpisodeTurns, ToolCallReply } from '../agents/episode';
import { functionDefinitions, runtimeHints, zodMessage, type Tool } from '../agents/tool';
import type { FunctionDefinition } from '../agents/chat-template';
import { GatewayError } from './errors';
import { JOURNAL_COUNTERS, toolCallHash, type EpisodeCalls } from './journal';

/** Counted per agent in the trajectory (`counters`): its tool calls through the gateway. */
export const TOOL_COUNTERS = { calls: 'gatewayToolCalls' } as const;

/** A call's answer, and whether the tool's output is an MCP result to pass on as is. */
export interface ToolAnswer {
  reply: ToolCallReply;
  mcpResult: boolean;
}

export class AgentTools {
  constructor(
    private readonly episode: EpisodeTurns,
    readonly role: string,
    private readonly calls: EpisodeCalls,
  ) {}

  private get tools(): readonly Tool[] {
    return this.episode.team.agents[this.role]?.tools ?? [];
  }

  /** The agent's tools, as its chat template is given them. */
  list(): FunctionDefinition[] {
    return functionDefinitions(this.tools);
  }

  /**
   * Calls the agent's tool `name` on `args` (missing: no arguments). An unknown tool is refused
   * (a GatewayError naming `params.name`) and takes no index; arguments the tool's input schema refuses
   * are a tool error naming the field (`arguments.n`), without a call. Otherwise the reply is the
   * tool's (or the journal's), a result or a tool error.
   */
  async call(name: string, args: unknown): Promise<ToolAnswer> {
    const tools = this.tools;
    const tool = tools.find((t) => t.name === name);
    if (!tool)
      throw new GatewayError(
        404,
        `agent ${this.role} has no tool ${JSON.stringify(name)} (its tools: ${tools.map((t) => t.name).join(', ') || 'none'})`,
        'params.name',
        'tool_not_found',
      );
    const mcpResult = runtimeHints(tool).mcpResult === true;
    const valid = tool.input.safeParse(args ?? {});
    if (!valid.success)
      return { reply: { ok: false, error: `${tool.name}: invalid input: ${zodMessage(valid.error, 'arguments')}`, durationMs: 0 }, mcpResult };
    const hash = toolCallHash(this.role, tool.name, valid.data);
    const { index, answered } = await this.calls.takeTool(this.role, hash);
    const reply = await this.episode.callTool(this.role, { tool: tool.name, input: valid.data, call: index }, answered?.reply);
    // journaled before the agent's code sees it: whatever it was answered, a retry answers the same
    if (answered) this.episode.count(this.role, JOURNAL_COUNTERS.replayed);
    else await this.calls.record({ kind: 'tool', index, agent: this.role, requestHash: hash, reply });
    this.episode.count(this.role, TOOL_COUNTERS.calls);
    return { reply, mcpResult };
  }
}
