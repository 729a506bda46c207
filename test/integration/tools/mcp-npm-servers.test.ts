/**
 * MCP servers from npm as team tools (agents/mcp.ts): @modelcontextprotocol/server-everything
 * over stdio and over streamable HTTP, and @modelcontextprotocol/server-filesystem on a scratch
 * directory. Calls go through executeTool, as a tool activity runs them.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { mcpServer } from '../../../agents';
import type { ToolCallReply } from '../../../agents/episode';
import { executeTool } from '../../../activities/tools';
import { teamWith } from './fixtures/mcp-team';

const bin = (pkg: string) => path.join(path.dirname(require.resolve(`@modelcontextprotocol/${pkg}/package.json`)), 'dist', 'index.js');
let n = 0;
const call = (team: ReturnType<typeof teamWith>, tool: string, input: unknown = {}): Promise<ToolCallReply> =>
  executeTool(team, { tool, input, episodeId: 'e1', turn: 0, call: n++, seed: 1 });

const rendered = async (team: ReturnType<typeof teamWith>, tool: string, input: unknown = {}) => {
  const r = await call(team, tool, input);
  assert.ok(r.ok, JSON.stringify(r));
  return r.rendered;
};

const everythingTools = {
  echo: 'echo',
  sum: 'get-sum',
  tiny_image: 'get-tiny-image',
  weather: 'get-structured-content',
  slow: 'trigger-long-running-operation',
};

describe('server-everything over stdio', () => {
  const server = mcpServer({
    name: 'everything',
    command: process.execPath,
    args: [bin('server-everything'), 'stdio'],
    tools: everythingTools,
    timeoutMs: 3_000,
  });
  const team = teamWith(server, { name: 'mcp-npm' });
  after(() => server.close());

  it('calls its tools, content of every kind rendered', async () => {
    assert.equal(await rendered(team, 'echo', { message: 'hi' }), 'Echo: hi');
    assert.match(await rendered(team, 'sum', { a: 2, b: 3 }), /\b5\b/);
    assert.match(await rendered(team, 'tiny_image'), /\[image image\/png\]/);
    const weather = await call(team, 'weather', { location: 'New York' });
    assert.ok(weather.ok, JSON.stringify(weather));
    assert.equal(typeof (weather.output as { structuredContent?: { temperature?: unknown } }).structuredContent?.temperature, 'number');
  });

  it("checks input against the server's schema, and gives a slow call a tool error at the time limit", async () => {
    const bad = await call(team, 'sum', { a: 'two', b: 3 });
    assert.ok(!bad.ok);
    assert.match(bad.error, /^sum: invalid input: input\.a/);
    const slow = await call(team, 'slow', { duration: 30, steps: 2 });
    assert.deepEqual(slow.ok ? 'answered' : slow.error, 'slow: timed out after 3000 ms');
    assert.equal(await rendered(team, 'echo', { message: 'again' }), 'Echo: again', 'a fresh server answers');
  });
});

describe('server-everything over streamable HTTP', () => {
  let child: ChildProcess;
  let url = '';
  before(async () => {
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    child = spawn(process.execPath, [bin('server-everything'), 'streamableHttp'], {
      env: { ...process.env, PORT: String(port) },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    await new Promise<void>((resolve, reject) => {
      let err = '';
      child.stderr?.on('data', (d: Buffer) => {
        err += d.toString();
        if (err.includes('listening on port')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`server-everything exited (${code}): ${err}`)));
    });
    url = `http://127.0.0.1:${port}/mcp`;
  });
  after(() => {
    child.kill();
  });

  it('calls its tools at a URL', async () => {
    const server = mcpServer({ name: 'everything-http', url, tools: { echo: 'echo', sum: 'get-sum' } });
    try {
      assert.equal(await rendered(teamWith(server, { name: 'mcp-npm' }), 'echo', { message: 'over http' }), 'Echo: over http');
      assert.ok((await server.list()).some((t) => t.name === 'get-sum'));
    } finally {
      await server.close();
    }
  });

  it('a URL with no server is a tool error', async () => {
    const server = mcpServer({ name: 'nobody', url: 'http://127.0.0.1:9/mcp', tools: ['echo'], timeoutMs: 3_000 });
    const r = await call(teamWith(server, { name: 'mcp-npm' }), 'echo', { message: 'x' });
    assert.ok(!r.ok);
    assert.match(r.error, /^echo: MCP server nobody \(http:\/\/127\.0\.0\.1:9\/mcp\) did not start/);
  });
});

describe('server-filesystem on a scratch directory', () => {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-mcp-fs-')));
  const server = mcpServer({
    name: 'files',
    command: process.execPath,
    args: [bin('server-filesystem'), dir],
    tools: ['write_file', 'read_text_file', 'list_directory'],
  });
  const team = teamWith(server, { name: 'mcp-npm' });
  after(async () => {
    await server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('writes, reads and lists files in its directory, and refuses one outside it', async () => {
    await rendered(team, 'write_file', { path: path.join(dir, 'note.txt'), content: 'hello from an agent' });
    assert.equal(fs.readFileSync(path.join(dir, 'note.txt'), 'utf8'), 'hello from an agent');
    assert.equal(await rendered(team, 'read_text_file', { path: path.join(dir, 'note.txt') }), 'hello from an agent');
    assert.match(await rendered(team, 'list_directory', { path: dir }), /\[FILE\] note\.txt/);
    const outside = await call(team, 'read_text_file', { path: '/etc/hostname' });
    assert.ok(!outside.ok);
    assert.match(outside.error, /^read_text_file: .*(denied|outside)/i);
  });
});
