/**
 * The team's MCP servers listed when a run starts (`tools/list`): what each server offers, and
 * the declared tools it lacks, recorded as the run's `tools-listed` event (troupe status, the
 * dashboard's events), before any agent calls a tool. A declared tool a server lacks fails the
 * start where the server says onError 'fail-run' (a refused start stores nothing); elsewhere it
 * is recorded, and an agent that calls it gets the tool error naming what the server has. A
 * server that does not answer in time is recorded too, never a reason to refuse the run: it may
 * be started by the time a call needs it.
 */
import { mcpServersOf, type McpToolInfo } from '../../agents/mcp';
import type { AnyTeam } from '../../agents/team';
import { errorMessage } from '../../infra/errors';

export interface ServerListing {
  server: string;
  /** What the server listed: names and descriptions (each tool's input schema too). */
  tools?: McpToolInfo[];
  /** Declared tools (their MCP names) the server did not list. */
  missing?: string[];
  /** Why it was not listed (did not start, no answer within the time limit). */
  error?: string;
  failsRun: boolean;
}

/** Lists each MCP server the team's agents use, at most `timeoutMs` each, and ends the servers this listing started. */
export async function listTeamServers(team: AnyTeam, timeoutMs = 8000): Promise<ServerListing[]> {
  const servers = mcpServersOf(Object.values(team.agents).flatMap((a) => a.tools));
  return Promise.all(
    servers.map(async (s): Promise<ServerListing> => {
      let timer: NodeJS.Timeout | undefined;
      try {
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no tools/list answer within ${timeoutMs} ms`)), timeoutMs);
        });
        const tools = await Promise.race([s.list(), timeout]);
        const listed = new Set(tools.map((t) => t.name));
        const missing = s.declared.map((d) => d.mcpName).filter((n) => !listed.has(n));
        return { server: s.name, tools, ...(missing.length ? { missing } : {}), failsRun: s.failsRun };
      } catch (e) {
        return { server: s.name, error: errorMessage(e), failsRun: s.failsRun };
      } finally {
        clearTimeout(timer);
        await s.close().catch(() => undefined);
      }
    }),
  );
}

/** Why the start is refused: a declared tool missing from a server whose problems fail the run; else undefined. */
export function listingRefusal(listings: readonly ServerListing[]): string | undefined {
  const bad = listings.filter((l) => l.failsRun && l.missing);
  if (bad.length === 0) return undefined;
  return bad
    .map(
      (l) =>
        `MCP server ${l.server} has no tool ${l.missing?.map((m) => JSON.stringify(m)).join(', ')} (it lists: ${l.tools?.map((t) => t.name).join(', ') || 'none'})`,
    )
    .join('; ');
}
