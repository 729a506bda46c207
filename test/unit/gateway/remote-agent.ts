/**
 * Agent code as a remote agent runs it, for tls.test.ts: the real `openai` client in a
 * process of its own, its session given as OPENAI_BASE_URL / OPENAI_API_KEY (which the
 * client reads) and the gateway's CA trusted through NODE_EXTRA_CA_CERTS. Two chat
 * completions, the second after a tool message; prints the replies, or what the client
 * threw, as one JSON line.
 */
import OpenAI from 'openai';

const causes = (e: unknown): string[] => (e instanceof Error ? [`${(e as { code?: string }).code ?? ''} ${e.message}`, ...causes(e.cause)] : []);

async function main() {
  const client = new OpenAI({ maxRetries: 0, timeout: 30_000 });
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'Answer.' },
    { role: 'user', content: 'What is x?' },
  ];
  const replies: string[] = [];
  try {
    for (const next of [{ role: 'tool' as const, tool_call_id: 'c1', content: 'x=7' }, undefined]) {
      const reply = (await client.chat.completions.create({ model: 'policy', messages, max_tokens: 12, temperature: 1 })).choices[0]!.message;
      replies.push(reply.content ?? '');
      messages.push({ role: 'assistant', content: reply.content });
      if (next) messages.push(next);
    }
    console.log(JSON.stringify({ replies }));
  } catch (e) {
    const err = e as InstanceType<typeof OpenAI.APIError>;
    console.log(JSON.stringify({ replies, error: { name: err.constructor.name, status: err.status, param: err.param, code: err.code, causes: causes(e) } }));
  }
}

void main();
