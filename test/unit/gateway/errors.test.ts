/**
 * Malformed requests to the gateway, Chat Completions and Responses, through
 * the real `openai` client (raw HTTP where the client cannot send the fault): each gets an OpenAI-style
 * error body naming the field, and nothing is recorded (no generation, no turn).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import OpenAI from 'openai';
import type { EpisodeIO, OpenAISession } from '../../../agents/episode';
import { runBatchedEpisode } from '../../../activities/training/episode-sandbox';
import { openGatewaySessions } from '../../../gateway';
import { gatewayTeam } from './team';

const io = (generations: { n: number }): EpisodeIO => ({
  async generate() {
    generations.n++;
    return { tokens: [], logprobs: [], stopReason: 'max_tokens' };
  },
  callTool: async () => ({ ok: false, error: 'none', durationMs: 0 }),
  now: () => 0,
  openSessions: openGatewaySessions,
});

type Failure = { status: number; param: string | null; code: string | null; message: string; type: string };

async function failure(p: Promise<unknown>): Promise<Failure> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    const body = e.error as { param: string | null; code: string | null; message: string; type: string };
    return { status: e.status!, ...body };
  }
  assert.fail('the request succeeded');
}

async function raw(session: OpenAISession, body: string, key = session.apiKey, route = '/chat/completions'): Promise<Failure> {
  const res = await fetch(`${session.baseURL}${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body,
  });
  const json = (await res.json()) as { error: Omit<Failure, 'status'> };
  assert.equal(res.headers.get('x-should-retry'), 'false');
  return { status: res.status, ...json.error };
}

it('malformed requests get an OpenAI error naming the field and record nothing', async () => {
  const generations = { n: 0 };
  const results: Record<string, Failure> = {};
  let other: OpenAISession | undefined;
  let release!: () => void;
  const otherOpen = new Promise<void>((r) => (release = r));
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  // the other episode holds its session open until this one is done with it
  const otherTeam = gatewayTeam(async ({ agents }) => {
    other = agents.solver.openai;
    release();
    await done;
  });
  const team = gatewayTeam(async ({ agents }) => {
    await otherOpen;
    try {
      await requests(agents.solver.openai);
    } finally {
      finish();
    }
  });
  async function requests(s: OpenAISession) {
    const client = new OpenAI({ ...s, maxRetries: 0 });
    const user = [{ role: 'user' as const, content: 'hi' }];
    results.json = await raw(s, '{"model": "policy", "messages": [');
    results.model = await failure(client.chat.completions.create({ model: 'gpt-4o', messages: user }));
    results.messages = await failure(client.chat.completions.create({ model: 'policy' } as never));
    results.role = await failure(client.chat.completions.create({ model: 'policy', messages: [{ role: 'robot', content: 'x' }] } as never));
    results.schema = await failure(
      client.chat.completions.create({
        model: 'policy',
        messages: user,
        tools: [{ type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'digits' } } } } }],
      }),
    );
    results.n = await failure(client.chat.completions.create({ model: 'policy', messages: user, n: 2 }));
    // a character the team's tokenizer cannot encode, in a call's arguments: named at the call, not the content
    results.encodeCall = await failure(
      client.chat.completions.create({
        model: 'policy',
        messages: [
          ...user,
          { role: 'assistant', content: 'ok', tool_calls: [{ id: 'c', type: 'function', function: { name: 'add', arguments: '{"a": "é"}' } }] },
        ],
      }),
    );
    results.session = await failure(
      new OpenAI({ ...s, baseURL: s.baseURL.replace(/\/s\/[^/]+\//, '/s/nosuchsession/'), maxRetries: 0 }).chat.completions.create({
        model: 'policy',
        messages: user,
      }),
    );
    results.key = await failure(new OpenAI({ ...s, apiKey: 'sk-guess', maxRetries: 0 }).chat.completions.create({ model: 'policy', messages: user }));
    // this episode's key on the other episode's session, and the other's key on this one's
    results.another = await failure(
      new OpenAI({ baseURL: other!.baseURL, apiKey: s.apiKey, maxRetries: 0 }).chat.completions.create({ model: 'policy', messages: user }),
    );
    // the other episode's key on this episode's session
    results.crossed = await raw(s, JSON.stringify({ model: 'policy', messages: user }), other!.apiKey);
    await responses(s);
  }
  /** The Responses API's faults (`/responses`), each naming its field in that API's terms. */
  async function responses(s: OpenAISession) {
    const client = new OpenAI({ ...s, maxRetries: 0 });
    const create = (body: Record<string, unknown>) => failure(client.responses.create({ model: 'policy', input: 'hi', ...body } as never));
    const add = { type: 'function', name: 'add', parameters: { type: 'object', properties: {} }, strict: false };
    results.rJson = await raw(s, '{"model": "policy", "input": [', s.apiKey, '/responses');
    results.rModel = await create({ model: 'gpt-4o' });
    results.rInput = await create({ input: [] });
    results.rItem = await create({ input: [{ type: 'reasoning', summary: [] }] });
    results.rRole = await create({ input: [{ role: 'tool', content: 'x' }] });
    results.rPart = await create({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:,' }] }] });
    results.rCall = await create({
      input: [
        { role: 'user', content: 'hi' },
        { type: 'function_call', name: 'add', arguments: '{}' },
      ],
    });
    results.rOutput = await create({ input: [{ type: 'function_call_output', call_id: 'c', output: 5 }] });
    results.rSchema = await create({ tools: [{ ...add, parameters: { type: 'object', properties: { a: { type: 'digits' } } } }] });
    results.rTool = await create({ tools: [{ type: 'web_search' }] });
    results.rChoice = await create({ tools: [add], tool_choice: { type: 'function', name: 'sub' } });
    results.rPrevious = await create({ previous_response_id: 'resp_1' });
    results.rMax = await create({ max_output_tokens: 0 });
    results.rFormat = await create({ text: { format: { type: 'json_object' } } });
    // a character the team's tokenizer cannot encode, in a tool's output: named where it is in the request
    results.rEncode = await create({
      input: [
        { role: 'user', content: 'hi' },
        { type: 'function_call_output', call_id: 'c', output: 'é' },
      ],
    });
    // the same in a call that joins the assistant message before it: named at the call's item
    results.rEncodeCall = await create({
      input: [
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'ok' },
        { type: 'function_call', call_id: 'c', name: 'add', arguments: '{"a": "é"}' },
      ],
    });
  }
  const input = (episodeId: string) => ({ episodeId, seed: 1, task: 0, versions: { policy: 0, other: 0 } });
  const [mine, theirs] = await Promise.all([
    runBatchedEpisode(team, input('e-mine'), io(generations)),
    runBatchedEpisode(otherTeam, input('e-other'), io(generations)),
  ]);
  assert.equal(mine.status, 'completed', mine.error);
  assert.equal(theirs.status, 'completed', theirs.error);

  const summary = Object.fromEntries(Object.entries(results).map(([k, f]) => [k, [f.status, f.param, f.code]]));
  assert.deepEqual(summary, {
    json: [400, 'body', 'invalid_value'],
    model: [404, 'model', 'model_not_found'],
    messages: [400, 'messages', 'invalid_value'],
    role: [400, 'messages[0].role', 'invalid_value'],
    schema: [400, 'tools[0].function.parameters.properties.a.type', 'invalid_value'],
    n: [400, 'n', 'invalid_value'],
    encodeCall: [400, 'messages[1].tool_calls[0]', 'invalid_value'],
    session: [404, 'baseURL', 'session_not_found'],
    key: [401, 'apiKey', 'invalid_api_key'],
    another: [403, 'apiKey', 'session_mismatch'],
    crossed: [403, 'apiKey', 'session_mismatch'],
    rJson: [400, 'body', 'invalid_value'],
    rModel: [404, 'model', 'model_not_found'],
    rInput: [400, 'input', 'invalid_value'],
    rItem: [400, 'input[0].type', 'invalid_value'],
    rRole: [400, 'input[0].role', 'invalid_value'],
    rPart: [400, 'input[0].content[0]', 'invalid_value'],
    rCall: [400, 'input[1].call_id', 'invalid_value'],
    rOutput: [400, 'input[0].output', 'invalid_value'],
    rSchema: [400, 'tools[0].parameters.properties.a.type', 'invalid_value'],
    rTool: [400, 'tools[0].type', 'invalid_value'],
    rChoice: [400, 'tool_choice.name', 'invalid_value'],
    rPrevious: [400, 'previous_response_id', 'invalid_value'],
    rMax: [400, 'max_output_tokens', 'invalid_value'],
    rFormat: [400, 'text.format', 'invalid_value'],
    rEncode: [400, 'input[1].output', 'invalid_value'],
    rEncodeCall: [400, 'input[2]', 'invalid_value'],
  });
  assert.match(results.json!.message, /^body: not valid JSON/);
  assert.match(results.schema!.message, /"digits" is not a JSON Schema type/);
  assert.equal(results.model!.type, 'not_found_error');
  assert.equal(generations.n, 0, 'no generation');
  assert.deepEqual([mine.turns, theirs.turns, mine.counters, theirs.counters], [[], [], undefined, undefined], 'nothing recorded');
});

/** Renders like the test team's template but refuses tool messages, as some models' templates do: the fault comes at render time. */
const REFUSES_TOOL_MESSAGES =
  "{%- for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}" +
  '<{{ m.role }}>{{ m.content }}\n{% endfor -%}' +
  '{%- if add_generation_prompt %}<assistant>{% endif -%}';

it('a session fault names the messages in the terms of the API the request came through', async () => {
  const generations = { n: 0 };
  const results: Record<string, Failure> = {};
  // the same conversation both ways: a user message, a call and its result
  const ask = (fault: string) =>
    gatewayTeam(
      async ({ agents }) => {
        const client = new OpenAI({ ...agents.solver.openai, maxRetries: 0 });
        results[`${fault}Chat`] = await failure(
          client.chat.completions.create({
            model: 'policy',
            messages: [
              { role: 'user', content: 'hi' },
              { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'add', arguments: '{}' } }] },
              { role: 'tool', tool_call_id: 'c', content: '5' },
            ],
          }),
        );
        results[`${fault}Responses`] = await failure(
          client.responses.create({
            model: 'policy',
            instructions: 'add',
            input: [
              { role: 'user', content: 'hi' },
              { type: 'function_call', call_id: 'c', name: 'add', arguments: '{}' },
              { type: 'function_call_output', call_id: 'c', output: '5' },
            ],
          }),
        );
      },
      4,
      fault === 'render' ? REFUSES_TOOL_MESSAGES : null,
    );
  const input = (episodeId: string) => ({ episodeId, seed: 1, task: 0, versions: { policy: 0, other: 0 } });
  const episodes = [
    await runBatchedEpisode(ask('render'), input('e-render'), io(generations)),
    await runBatchedEpisode(ask('none'), input('e-none'), io(generations)),
  ];
  for (const e of episodes) assert.equal(e.status, 'completed', e.error);

  const summary = Object.fromEntries(Object.entries(results).map(([k, f]) => [k, [f.status, f.param, f.code]]));
  assert.deepEqual(summary, {
    renderChat: [400, 'messages', 'invalid_value'],
    renderResponses: [400, 'input', 'invalid_value'],
    noneChat: [400, 'messages', 'no_chat_template'],
    noneResponses: [400, 'input', 'no_chat_template'],
  });
  for (const k of ['renderChat', 'renderResponses']) assert.match(results[k]!.message, /tool messages are not supported/);
  for (const k of ['noneChat', 'noneResponses']) assert.match(results[k]!.message, /team gateway-test has no chatTemplate/);
  assert.equal(generations.n, 0, 'no generation');
  assert.deepEqual(
    episodes.map((e) => [e.turns, e.counters]),
    [
      [[], undefined],
      [[], undefined],
    ],
    'nothing recorded',
  );
});
