/**
 * A Hugging Face `tokenizer.json` as a Tokenizer: byte-level BPE (GPT-2,
 * Llama 3, Qwen), SentencePiece-style BPE and Unigram, WordPiece — whatever
 * `@huggingface/tokenizers` implements (pure JS, no native code) — with the
 * file's added and special tokens. Special tokens written in the text
 * (`<|im_end|>`) encode to their ids; nothing else is added (no BOS/EOS from
 * the post-processor): contexts are assembled by the episode and the chat
 * template, token by token.
 *
 * Heavy (a vocabulary of 10^5 entries): built in activities and engines from
 * the model directory (./hf-dir.ts), never imported by workflow code.
 */
import { Tokenizer as HfTokenizerImpl } from '@huggingface/tokenizers';
import type { Tokenizer } from '../tokenizer';

export interface HfTokenizer extends Tokenizer {
  readonly kind: 'hf';
  /** token_to_id of a token's string (special tokens included) */
  tokenId(token: string): number | undefined;
  /** tokenizer_config.json's chat_template, if any */
  readonly chatTemplate?: string;
  /** the special tokens' strings by role, for chat templates (`bos_token`, `eos_token`, …) */
  readonly specialTokens: Readonly<Record<string, string>>;
}

type Json = Record<string, unknown>;

/** The content of a tokenizer_config.json token field (a string or an AddedToken object). */
function tokenContent(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content as string;
  return undefined;
}

/** tokenizerJson: tokenizer.json's content; config: tokenizer_config.json's (may be {}). `source` names them in errors. */
export function hfTokenizer(tokenizerJson: unknown, config: Json = {}, source = 'tokenizer.json'): HfTokenizer {
  if (typeof tokenizerJson !== 'object' || tokenizerJson === null || typeof (tokenizerJson as Json).model !== 'object') {
    throw new Error(`${source}: not a tokenizer.json (no "model" object)`);
  }
  let impl: HfTokenizerImpl;
  try {
    impl = new HfTokenizerImpl(tokenizerJson, config);
  } catch (e) {
    throw new Error(`${source}: ${(e as Error).message}`);
  }
  const vocab = impl.get_vocab(true);
  let size = 0;
  for (const id of vocab.values()) size = Math.max(size, id + 1);
  const specialTokens: Record<string, string> = {};
  for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
    const content = tokenContent(config[key]);
    if (content !== undefined) specialTokens[key] = content;
  }
  const idOf = (key: string): number | undefined => (specialTokens[key] === undefined ? undefined : impl.token_to_id(specialTokens[key]!));
  const eosId = idOf('eos_token') ?? impl.token_to_id('<|endoftext|>') ?? impl.token_to_id('</s>');
  if (eosId === undefined) throw new Error(`${source}: no end-of-sequence token (tokenizer_config.json eos_token, or <|endoftext|> / </s> in the vocabulary)`);
  const template = config.chat_template;
  const decodeOne = (id: number) => impl.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  // a vocabulary scan per character (~10^5 decodes), once per tokenizer
  const containing = new Map<string, number[]>();
  return {
    kind: 'hf',
    size,
    eosId,
    // GPT-2 and Qwen have no BOS of their own; their end-of-text token also separates documents
    bosId: idOf('bos_token') ?? eosId,
    padId: idOf('pad_token') ?? eosId,
    specialTokens,
    chatTemplate: typeof template === 'string' ? template : undefined,
    tokenId: (token) => impl.token_to_id(token),
    encode: (text) => impl.encode(text, { add_special_tokens: false }).ids,
    idsContaining(char) {
      let ids = containing.get(char);
      if (!ids) {
        ids = [];
        for (let id = 0; id < size; id++) if (decodeOne(id).includes(char)) ids.push(id);
        containing.set(char, ids);
      }
      return ids;
    },
    decode: (ids) => (ids.length === 0 ? '' : impl.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false })),
  };
}
