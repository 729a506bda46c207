// The team's MCP servers listed at run start (activities/training/tool-listing.ts), against the real
// fixture server (fixtures/mcp-server.mjs): what it lists, a declared tool it lacks (refusing the
// start only where the server says onError 'fail-run'), and a server that does not start.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { it } from 'node:test';
import { mcpServer } from '../../../agents';
import { listingRefusal, listTeamServers } from '../../../activities/training/tool-listing';
import { eventLine } from '../../../cli/commands/status';
import { teamWith } from './fixtures/mcp-team';

const server = path.join(__dirname, 'fixtures', 'mcp-server.mjs');

it('lists each server once, names what it lacks, and refuses only for fail-run servers', async () => {
  const ok = mcpServer({ name: 'ok', command: process.execPath, args: [server], tools: ['echo', 'pid'] });
  const lacking = mcpServer({ name: 'lacking', command: process.execPath, args: [server], tools: { say: 'echo', nope: 'no-such-tool' } });
  const strict = mcpServer({ name: 'strict', command: process.execPath, args: [server], tools: ['echo', 'absent'], onError: 'fail-run' });
  const broken = mcpServer({ name: 'broken', command: process.execPath, args: [path.join(__dirname, 'no-such-server.mjs')], tools: ['echo'] });

  const listings = await listTeamServers(teamWith(ok));
  assert.equal(listings.length, 1);
  assert.equal(listings[0]?.server, 'ok');
  assert.ok(listings[0]?.tools?.some((t) => t.name === 'echo' && typeof t.inputSchema === 'object'));
  assert.equal(listings[0]?.missing, undefined);
  assert.equal(listingRefusal(listings), undefined);

  const [l] = await listTeamServers(teamWith(lacking));
  assert.deepEqual(l?.missing, ['no-such-tool']);
  assert.equal(listingRefusal([l!]), undefined, 'a tool-error server is recorded, not refused');
  assert.match(
    eventLine({ step: 0, kind: 'tools-listed', detail: { servers: [l] } }),
    /^MCP tools listed at start: lacking: .*echo.* \(declared but missing: no-such-tool\)$/,
  );

  const [s] = await listTeamServers(teamWith(strict));
  assert.match(listingRefusal([s!]) ?? '', /^MCP server strict has no tool "absent" \(it lists: .*echo.*\)$/);

  const [b] = await listTeamServers(teamWith(broken), 5000);
  assert.ok(b?.error, 'a server that does not start is recorded with its error');
  assert.equal(listingRefusal([b!]), undefined);
  assert.match(eventLine({ step: 0, kind: 'tools-listed', detail: { servers: [b] } }), /^MCP tools listed at start: broken: not listed \(/);
});
