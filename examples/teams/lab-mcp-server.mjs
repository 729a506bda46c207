// The `lab` team's checker service: an MCP server over stdio (@modelcontextprotocol/sdk) with one
// tool, `check`, that says whether a product was computed right. The team starts it with
// `command: process.execPath, args: [this file]` (examples/teams/lab.ts). With LAB_MCP_CALL_LOG set,
// it appends a line per call to that file (a test counts the calls durable episodes make); with
// LAB_MCP_CRASH set, `check` ends the server mid-call (a test of the team's checkerOnError).
import { appendFileSync } from 'node:fs';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'lab-checker', version: '1.0.0' });

server.registerTool(
  'check',
  {
    description: 'Checks a product: "Y" when answer is the value of expr ("a*b"), else "N".',
    inputSchema: { expr: z.string().regex(/^\d{1,3}\*\d{1,3}$/), answer: z.string().max(8) },
  },
  async ({ expr, answer }) => {
    const [a, b] = expr.split('*').map(Number);
    const right = /^\d+$/.test(answer) && Number(answer) === a * b;
    if (process.env.LAB_MCP_CALL_LOG) appendFileSync(process.env.LAB_MCP_CALL_LOG, `${process.pid} ${expr}=${answer}\n`);
    if (process.env.LAB_MCP_CRASH) {
      process.stderr.write('lab-checker: crashing on purpose (LAB_MCP_CRASH)\n');
      process.exit(3);
    }
    return { content: [{ type: 'text', text: right ? 'Y' : 'N' }] };
  },
);

await server.connect(new StdioServerTransport());
