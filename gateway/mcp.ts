/**
 * The gateway's MCP server: an agent's team tools (team-tools.ts) for its own code, over
 * streamable HTTP at `/s/<session>/mcp` under the episode's key (`session.mcpURL`), with
 * the MCP SDK's server side. Stateless: each POST is answered by a fresh server and transport
 * (JSON, no SSE stream), so any MCP client works and nothing is held between requests; GET
 * and DELETE (the standalone stream, session end) are refused with 405, which clients accept.
 *
 * `tools/list` gives the agent's tools with their JSON schemas (those whose input is an object:
 * MCP's arguments are one); `tools/call` runs one, its
 * answer the result (an MCP tool's content as its server gave it; another tool's rendered
 * output as text) or a tool error (`isError`). An unknown tool is a JSON-RPC error naming
 * `params.name`. The SDK (@modelcontextprotocol/sdk, an optional peer dependency) is loaded on
 * the first request.
 */
import type * as http from 'node:http';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { loadMcpModule } from '../agents/mcp';
import type { McpToolOutput } from '../agents/mcp';
import { GatewayError } from './errors';
import type { AgentTools, ToolAnswer } from './team-tools';

type Sdk = typeof import('@modelcontextprotocol/sdk/server/index.js') &
  typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js') &
  typeof import('@modelcontextprotocol/sdk/types.js');

let sdk: Promise<Sdk> | undefined;

function loadSdk(): Promise<Sdk> {
  const load = async (): Promise<Sdk> => {
    const [server, transport, types] = await Promise.all([
      loadMcpModule<typeof import('@modelcontextprotocol/sdk/server/index.js')>('@modelcontextprotocol/sdk/server/index.js'),
      loadMcpModule<typeof import('@modelcontextprotocol/sdk/server/streamableHttp.js')>('@modelcontextprotocol/sdk/server/streamableHttp.js'),
      loadMcpModule<typeof import('@modelcontextprotocol/sdk/types.js')>('@modelcontextprotocol/sdk/types.js'),
    ]);
    return { ...server, ...transport, ...types };
  };
  sdk ??= load();
  sdk.catch(() => (sdk = undefined)); // a failed load is tried again by the next request
  return sdk;
}

/** A call's answer as an MCP `tools/call` result. */
export function callResult({ reply, mcpResult }: ToolAnswer): CallToolResult {
  if (!reply.ok) return { content: [{ type: 'text', text: reply.error }], isError: true };
  if (mcpResult) {
    const out = reply.output as McpToolOutput;
    return { content: out.content as CallToolResult['content'], ...(out.structuredContent ? { structuredContent: out.structuredContent } : {}) };
  }
  return { content: [{ type: 'text', text: reply.rendered }] };
}

/**
 * Answers one MCP request (already authorized) for `tools`; `body` is the parsed JSON of a POST.
 * `serialize` runs a tool call in the episode's order of calls (one at a time, as turns are).
 */
export async function serveMcp(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  body: unknown,
  tools: AgentTools,
  serialize: <T>(call: () => Promise<T>) => Promise<T>,
): Promise<void> {
  const s = await loadSdk();
  const server: Server = new s.Server({ name: `troupe-${tools.role}`, version: '0.1.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(s.ListToolsRequestSchema, () => ({
    tools: tools
      .list()
      .filter(({ function: f }) => f.parameters?.type === 'object') // MCP's arguments are an object: a tool of other input is no MCP tool
      .map(({ function: f }) => ({ name: f.name, description: f.description, inputSchema: f.parameters as { type: 'object' } })),
  }));
  server.setRequestHandler(s.CallToolRequestSchema, async (request) => {
    try {
      return callResult(await serialize(() => tools.call(request.params.name, request.params.arguments)));
    } catch (e) {
      // a JSON-RPC error with the gateway's message as is (an McpError would prefix it, and the client again)
      if (e instanceof GatewayError)
        throw Object.assign(new Error(e.message), { code: e.param === 'params.name' ? s.ErrorCode.InvalidParams : s.ErrorCode.InternalError });
      throw e;
    }
  });
  const transport = new s.StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.once('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
}
