/**
 * A model's chat template (tokenizer_config.json `chat_template`, Jinja,
 * rendered by @huggingface/jinja) as the text that frames an agent's turns.
 *
 * Token in, token out: a context is never re-rendered. A conversation is
 * opened once (`open`: its first messages and the generation prompt) and
 * continued after each assistant turn (`next`: what the template puts after
 * an assistant message's content — its end token, which sampling usually
 * already produced, and any separator — then the new messages and the
 * generation prompt). The episode tokenizes each piece once, where it enters
 * the context, and keeps the sampled tokens as they were, so a template that
 * renders past turns differently (Qwen3 drops their think blocks) never
 * rewrites a context. A template's BOS and default system prompt appear once,
 * at the opening.
 */
import { Template } from '@huggingface/jinja';

export type ChatRole = 'system' | 'user' | 'assistant' | 'tool';

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

export interface ChatTemplate {
  /**
   * The opening of a conversation: these messages, then the generation prompt (BOS and a default
   * system prompt as the template writes them). `tools`: OpenAI-style function definitions, given
   * to the template as `tools` (Qwen/Hermes templates list them in the system turn).
   */
  open(messages: readonly ChatMessage[], tools?: readonly unknown[]): string;
  /** After an assistant turn: its closing (the end token too when the turn did not stop on it), the new messages, the generation prompt. */
  next(messages: readonly ChatMessage[], stoppedOnEnd: boolean): string;
}

/** A tool as a chat template is given it (`tools`): an OpenAI-style function definition. */
export interface FunctionDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

const PROBE = 'troupe_probe_tool';
const rendersTools = new WeakMap<ChatTemplate, boolean>();

/**
 * Whether the template shows the tools it is given (it reads `tools`), probed once per template.
 * A template that never shows them gets none: act() renders the turn without them, and the
 * gateway refuses a request with tools.
 */
export function templateRendersTools(chat: ChatTemplate): boolean {
  let known = rendersTools.get(chat);
  if (known === undefined) {
    const probe: FunctionDefinition[] = [{ type: 'function', function: { name: PROBE, description: '', parameters: { type: 'object', properties: {} } } }];
    known = chat.open([{ role: 'user', content: 'u' }], probe).includes(PROBE);
    rendersTools.set(chat, known);
  }
  return known;
}

export class ChatTemplateError extends Error {
  constructor(message: string) {
    super(`chat template: ${message}`);
    this.name = 'ChatTemplateError';
  }
}

/** Content no template rewrites, to find where a message's content sits in a rendering. */
const MARK = 'TROUPE\u2063MARK';

/**
 * source: the Jinja template; specialTokens: bos_token, eos_token, … as the
 * template expects them; endToken: the text of the token that ends an
 * assistant turn (the team tokenizer's eos).
 */
export function chatTemplate(source: string, specialTokens: Readonly<Record<string, string>>, endToken: string): ChatTemplate {
  let template: Template;
  try {
    template = new Template(source);
  } catch (e) {
    throw new ChatTemplateError(`does not parse: ${(e as Error).message}`);
  }
  const render = (messages: readonly ChatMessage[], addGenerationPrompt: boolean, tools?: readonly unknown[]): string => {
    try {
      return template.render({
        ...specialTokens,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: addGenerationPrompt,
        ...(tools && tools.length > 0 ? { tools } : {}),
      });
    } catch (e) {
      throw new ChatTemplateError(`rendering [${messages.map((m) => m.role).join(', ')}] failed: ${(e as Error).message}`);
    }
  };
  // A conversation that has had one assistant turn (its content the mark): whatever the
  // template writes after that content is the closing of the turn, the new messages and the
  // generation prompt. Rendering the whole also handles templates that render the last
  // assistant turn differently from earlier ones (Qwen3's empty think block).
  const base: ChatMessage[] = [
    { role: 'system', content: 'system' },
    { role: 'user', content: 'user' },
    { role: 'assistant', content: MARK },
  ];
  const afterTurn = (messages: readonly ChatMessage[]): string => {
    const text = render([...base, ...messages], true);
    const at = text.indexOf(MARK);
    if (at < 0) throw new ChatTemplateError('an assistant message’s content does not appear in the rendering');
    const rest = text.slice(at + MARK.length);
    // generation stops on the end token, so the template's text after it is still to add
    if (!rest.startsWith(endToken))
      throw new ChatTemplateError(
        `an assistant message is not closed by the end token ${JSON.stringify(endToken)} (it is followed by ${JSON.stringify(rest.slice(0, 40))})`,
      );
    return rest;
  };
  afterTurn([{ role: 'user', content: 'user' }]); // checks the template once, not on the first turn
  return {
    open(messages, tools) {
      if (messages.length === 0) throw new ChatTemplateError('open: at least one message');
      return render(messages, true, tools);
    },
    next(messages, stoppedOnEnd) {
      const text = afterTurn(messages);
      return stoppedOnEnd ? text.slice(endToken.length) : text;
    },
  };
}
