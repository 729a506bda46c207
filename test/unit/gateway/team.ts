/**
 * A team for the gateway tests: a character tokenizer over printable ASCII and
 * newline (any JSON encodes), a Hermes-style chat template that lists the tools
 * as JSON, and agent code written against the real `openai` client, given as
 * the test's episode function.
 */
import assert from 'node:assert/strict';
import type { CallJournal, JournaledCall } from '../../../agents/episode';
import { agent, chatTemplate, charTokenizer, defineTeam, generatedTasks, hermesSyntax, tinyLM, type AgentHandle, type Tool } from '../../../agents';

export const tokenizer = charTokenizer('\n' + Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join(''));

/** The end of an assistant turn is EOS (a character tokenizer has no text for it): endToken ''. */
export const TEMPLATE =
  '{%- if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif -%}' +
  '{%- for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor -%}' +
  '{%- if add_generation_prompt %}<assistant>{% endif -%}';

/** template: the chat template's source, or null for a team without one; tools: the solver's. */
export function gatewayTeam(
  episode: (ctx: { task: number; agents: Record<'solver' | 'helper', AgentHandle> }) => Promise<unknown>,
  maxTurns = 4,
  template: string | null = TEMPLATE,
  tools: readonly Tool[] = [],
) {
  return defineTeam({
    name: 'gateway-test',
    tokenizer,
    ...(template !== null ? { chatTemplate: chatTemplate(template, {}, '') } : {}),
    ...(tools.length > 0 ? { toolSyntax: hermesSyntax() } : {}),
    models: {
      policy: tinyLM({ tokenizer, contextWindow: 4, embedDim: 8, hiddenDim: 16 }),
      other: tinyLM({ tokenizer, contextWindow: 4, embedDim: 8, hiddenDim: 16 }),
    },
    agents: {
      solver: agent({ model: 'policy', maxTokens: 96, maxTurns, tools: [...tools] }),
      helper: agent({ model: 'other', maxTokens: 8, maxTurns }),
    },
    tasks: generatedTasks({ seed: 1, count: 4, evalFraction: 0.5, make: (_r, i) => ({ id: `t${i}`, data: i }) }),
    episode,
    rewards: { solver: () => ({ r: 0 }), helper: () => ({ r: 0 }) },
    success: () => true,
  });
}

/** A gateway journal in a map (the store's is activities/store/gateway-journal.ts): refuses a call journaled twice. */
export class MapJournal implements CallJournal {
  readonly calls = new Map<string, JournaledCall[]>();
  cleared = 0;
  async load(episodeId: string) {
    return [...(this.calls.get(episodeId) ?? [])];
  }
  async record(episodeId: string, call: JournaledCall) {
    const list = this.calls.get(episodeId) ?? [];
    assert.ok(!list.some((c) => c.index === call.index), `call ${call.index} journaled twice`);
    this.calls.set(episodeId, [...list, call]);
  }
  async clear(episodeId: string) {
    this.cleared++;
    this.calls.delete(episodeId);
  }
}
