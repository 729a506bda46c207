/**
 * The Responses API (`POST /responses`): the subset the OpenAI Agents SDK
 * (`@openai/agents`) sends on its default setting. A request is read as the
 * Chat Completions request it means (`instructions` the system message, input
 * items the messages: a `function_call` joins the assistant message before it,
 * a `function_call_output` is a tool message), so a call is one turn through
 * the same session as a chat completion (exact tokens, history matched to its
 * sampled ids, the journal). The reply's `output` is the turn's message and
 * function calls. The gateway keeps no responses: state held by OpenAI's
 * server (`previous_response_id`, `conversation`, `prompt`) is refused; the SDK
 * sends the whole history unless a run is given a previous response id.
 */
import type * as http from 'node:http';
import { invalid } from './errors';
import {
  isObject,
  optionalBool,
  parseSampling,
  parseToolList,
  positiveInteger,
  type ChatRequest,
  type FunctionTool,
  type MessageParams,
  type RequestMessage,
} from './request';
import type { Completion } from './session';

/** Asked for in `include`: the sampled tokens' log-probs on each output_text. */
const LOGPROBS = 'message.output_text.logprobs';

export function parseResponsesRequest(body: unknown): ChatRequest {
  if (!isObject(body)) throw invalid('body', 'must be a JSON object');
  if (typeof body.model !== 'string' || body.model === '') throw invalid('model', 'is required (a string)');
  for (const field of ['previous_response_id', 'conversation', 'prompt'] as const)
    if (body[field] !== undefined && body[field] !== null)
      throw invalid(field, 'is not supported: the gateway keeps no server-side state; send the whole conversation in `input`');
  if (body.background === true) throw invalid('background', 'is not supported: a call is answered when its turn is sampled');
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.top_logprobs !== 0)
    throw invalid('top_logprobs', 'is not supported: the engine returns the sampled tokens’ log-probs only');
  if (body.text !== undefined && body.text !== null) {
    const format = isObject(body.text) ? body.text.format : undefined;
    if (!isObject(body.text) || (format !== undefined && format !== null && !(isObject(format) && format.type === 'text')))
      throw invalid('text.format', 'only { type: "text" } is supported (the policy is not constrained to a schema)');
  }
  let include: unknown[] = [];
  if (body.include !== undefined && body.include !== null) {
    if (!Array.isArray(body.include) || body.include.some((x) => typeof x !== 'string')) throw invalid('include', 'must be an array of strings');
    include = body.include;
  }
  if (body.instructions !== undefined && body.instructions !== null && typeof body.instructions !== 'string') throw invalid('instructions', 'must be a string');
  const tools = parseToolList(body.tools, (t, at) => {
    if (!isObject(t) || t.type !== 'function') throw invalid(`${at}.type`, 'must be "function" (the gateway serves function tools only)');
    return [t, at];
  });
  const maxTokens = positiveInteger(body.max_output_tokens, 'max_output_tokens');
  const { messages, params } = parseInput(body.input, typeof body.instructions === 'string' ? body.instructions : '');
  return {
    model: body.model,
    messages,
    params: { messages: 'input', each: params },
    tools,
    toolChoice: parseToolChoice(body.tool_choice, tools),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...parseSampling(body),
    stop: [],
    stream: optionalBool(body.stream, 'stream') ?? false,
    includeUsage: false,
    logprobs: include.includes(LOGPROBS),
  };
}

/** The messages, and where each one's content and calls are in the request (for errors). */
function parseInput(input: unknown, instructions: string) {
  const messages: RequestMessage[] = instructions !== '' ? [{ role: 'system', content: instructions }] : [];
  const params: MessageParams['each'] = instructions !== '' ? [{ content: 'instructions', calls: [] }] : [];
  if (typeof input === 'string')
    return { messages: [...messages, { role: 'user' as const, content: input }], params: [...params, { content: 'input', calls: [] }] };
  if (!Array.isArray(input) || input.length === 0) throw invalid('input', 'is required (a string or a non-empty array of items)');
  input.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw invalid(at, 'must be an object');
    const type = item.type ?? (typeof item.role === 'string' ? 'message' : undefined);
    if (type === 'message') {
      const content = contentText(item.content, `${at}.content`);
      params.push({ content: `${at}.content`, calls: [] });
      if (item.role === 'user') messages.push({ role: 'user', content });
      else if (item.role === 'system' || item.role === 'developer') messages.push({ role: 'system', content });
      else if (item.role === 'assistant') messages.push({ role: 'assistant', content, toolCalls: [] });
      else throw invalid(`${at}.role`, `must be user, system, developer or assistant, got ${JSON.stringify(item.role)}`);
    } else if (type === 'function_call') {
      for (const field of ['call_id', 'name', 'arguments'] as const)
        if (typeof item[field] !== 'string') throw invalid(`${at}.${field}`, `must be a string${field === 'arguments' ? ' (JSON)' : ''}`);
      const call = { id: item.call_id as string, type: 'function' as const, function: { name: item.name as string, arguments: item.arguments as string } };
      // one reply's output items: its message (if any), then its calls
      const last = messages.at(-1);
      if (last?.role === 'assistant') {
        last.toolCalls.push(call);
        params.at(-1)!.calls.push(at);
      } else {
        messages.push({ role: 'assistant', content: '', toolCalls: [call] });
        params.push({ content: at, calls: [at] });
      }
    } else if (type === 'function_call_output') {
      if (typeof item.call_id !== 'string') throw invalid(`${at}.call_id`, 'must be a string');
      messages.push({ role: 'tool', content: contentText(item.output, `${at}.output`), toolCallId: item.call_id });
      params.push({ content: `${at}.output`, calls: [] });
    } else throw invalid(`${at}.type`, `must be message, function_call or function_call_output, got ${JSON.stringify(type)}`);
  });
  return { messages, params };
}

/** Content: a string or text parts (input_text, output_text). */
function contentText(v: unknown, at: string): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw invalid(at, 'must be a string or an array of text parts');
  return v
    .map((part, j) => {
      if (!isObject(part) || (part.type !== 'input_text' && part.type !== 'output_text') || typeof part.text !== 'string')
        throw invalid(`${at}[${j}]`, `only text parts (input_text, output_text) are supported, got ${JSON.stringify(isObject(part) ? part.type : part)}`);
      return part.text;
    })
    .join('');
}

function parseToolChoice(v: unknown, tools: readonly FunctionTool[]): ChatRequest['toolChoice'] {
  if (v === undefined || v === null) return tools.length > 0 ? 'auto' : 'none';
  if (v === 'none' || v === 'auto' || v === 'required') return v;
  if (isObject(v) && v.type === 'function' && typeof v.name === 'string') {
    const name = v.name;
    if (!tools.some((t) => t.function.name === name)) throw invalid('tool_choice.name', `no tool ${JSON.stringify(name)} in tools`);
    return { name };
  }
  throw invalid('tool_choice', 'must be "none", "auto", "required" or { type: "function", name }');
}

/** The output items of a turn: its text as a message (none when the reply is only calls), then each call. */
function outputItems(c: Completion, logprobs: boolean) {
  const items: Array<Record<string, unknown>> = [];
  if (c.message.content !== null) {
    const text = {
      type: 'output_text',
      text: c.message.content,
      annotations: [],
      ...(logprobs ? { logprobs: c.tokens.map((t) => ({ token: t.token, logprob: t.logprob, bytes: [...Buffer.from(t.token)], top_logprobs: [] })) } : {}),
    };
    items.push({ type: 'message', id: `msg_troupe_${c.turn.index}`, status: 'completed', role: 'assistant', content: [text] });
  }
  for (const call of c.message.tool_calls ?? [])
    items.push({
      type: 'function_call',
      id: `fc_${call.id}`,
      status: 'completed',
      call_id: call.id,
      name: call.function.name,
      arguments: call.function.arguments,
    });
  return items;
}

/** The response object; `incomplete` (status) when the turn stopped at its token limit, as OpenAI reports it. */
export function responseBody(c: Completion, logprobs: boolean) {
  const incomplete = c.finishReason === 'length';
  return {
    id: `resp_troupe_${c.turn.index}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: incomplete ? 'incomplete' : 'completed',
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    error: null,
    model: c.turn.model,
    output: outputItems(c, logprobs),
    parallel_tool_calls: true,
    usage: {
      input_tokens: c.usage.prompt_tokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: c.usage.completion_tokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: c.usage.total_tokens,
    },
  };
}

/**
 * Server-sent events, sent once the turn is sampled (the engine generates a turn whole):
 * created, each output item (added, its text or arguments as one delta, done), then the
 * terminal event with the whole response, whose tokens are the non-streamed reply's.
 */
export function streamResponse(res: http.ServerResponse, c: Completion, logprobs: boolean) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  let sequence = 0;
  const send = (type: string, data: Record<string, unknown>) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`);
  const done = responseBody(c, logprobs);
  send('response.created', { response: { ...done, status: 'in_progress', incomplete_details: null, output: [], usage: null } });
  done.output.forEach((item, output_index) => {
    const id = item.id as string;
    if (item.type === 'message') {
      const part = (item.content as Array<{ text: string; logprobs?: unknown[] }>)[0]!;
      send('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
      send('response.content_part.added', { item_id: id, output_index, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
      send('response.output_text.delta', { item_id: id, output_index, content_index: 0, delta: part.text, logprobs: part.logprobs ?? [] });
      send('response.output_text.done', { item_id: id, output_index, content_index: 0, text: part.text, logprobs: part.logprobs ?? [] });
      send('response.content_part.done', { item_id: id, output_index, content_index: 0, part });
    } else {
      send('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', arguments: '' } });
      send('response.function_call_arguments.delta', { item_id: id, output_index, delta: item.arguments });
      send('response.function_call_arguments.done', { item_id: id, output_index, arguments: item.arguments });
    }
    send('response.output_item.done', { output_index, item });
  });
  send(done.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: done });
  res.end();
}
