/**
 * The team's tokenizer: text <-> token ids. Contexts are built and kept as
 * ids; text is decoded for people (and for parsing tool calls), never
 * re-encoded to rebuild a context.
 *
 * Kinds: `chars` (here: character level, so text round-trips exactly and a
 * small vocabulary keeps RL from a random initialization feasible; ids 0..2
 * are the special tokens), `vocab` (here: a given list of strings, longest
 * match first, so a whole tool call can be one token a tiny policy can learn)
 * and `hf` (agents/tokenizers/hf.ts: a Hugging Face
 * tokenizer.json, for pretrained checkpoints).
 */
export interface Tokenizer {
  /** `placeholder`: a checkpoint's tokenizer seen from workflow code (agents/tokenizers/checkpoint.ts) */
  readonly kind: 'chars' | 'vocab' | 'hf' | 'placeholder';
  /** ids are 0..size−1 */
  readonly size: number;
  readonly padId: number;
  /** put first in every context (a transformer needs at least one context token) */
  readonly bosId: number;
  /** ends a turn */
  readonly eosId: number;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
  /**
   * Every token whose text contains `char`: sampling one may complete a text
   * ending in it (a tool-call trigger). A BPE vocabulary merges a trigger's last
   * character into longer tokens (`)]`, `>\n`), so `encode(char)` alone misses them.
   */
  idsContaining(char: string): number[];
}

export interface CharTokenizer extends Tokenizer {
  readonly kind: 'chars';
  readonly chars: string;
}

export const PAD = 0;
export const BOS = 1;
export const EOS = 2;
const SPECIALS = 3;

export function charTokenizer(chars: string): CharTokenizer {
  const seen = new Set<string>();
  for (const c of chars) {
    if (seen.has(c)) throw new Error(`tokenizer.chars: duplicate character ${JSON.stringify(c)}`);
    seen.add(c);
  }
  const list = [...chars];
  const index = new Map(list.map((c, i) => [c, i + SPECIALS]));
  return {
    kind: 'chars',
    chars,
    size: list.length + SPECIALS,
    padId: PAD,
    bosId: BOS,
    eosId: EOS,
    encode(text) {
      const ids: number[] = [];
      for (const c of text) {
        const id = index.get(c);
        if (id === undefined) throw new Error(`tokenizer: character ${JSON.stringify(c)} is not in the vocabulary ${JSON.stringify(chars)}`);
        ids.push(id);
      }
      return ids;
    },
    idsContaining(char) {
      const id = index.get(char);
      return id === undefined ? [] : [id];
    },
    decode(ids) {
      let out = '';
      for (const id of ids) if (id >= SPECIALS && id < list.length + SPECIALS) out += list[id - SPECIALS];
      return out;
    },
  };
}

/**
 * A tokenizer over a list of strings (characters and longer pieces): encoding takes the
 * longest piece that matches at each position. Ids 0..2 are the special tokens.
 */
export function vocabTokenizer(pieces: readonly string[]): Tokenizer {
  const seen = new Set<string>();
  for (const p of pieces) {
    if (p === '' || seen.has(p)) throw new Error(`tokenizer.pieces: ${p === '' ? 'an empty piece' : `duplicate piece ${JSON.stringify(p)}`}`);
    seen.add(p);
  }
  const index = new Map(pieces.map((p, i) => [p, i + SPECIALS]));
  const longestFirst = [...pieces].sort((a, b) => b.length - a.length);
  return {
    kind: 'vocab',
    size: pieces.length + SPECIALS,
    padId: PAD,
    bosId: BOS,
    eosId: EOS,
    encode(text) {
      const ids: number[] = [];
      for (let at = 0; at < text.length;) {
        const piece = longestFirst.find((p) => text.startsWith(p, at));
        if (piece === undefined) throw new Error(`tokenizer: no piece of the vocabulary matches ${JSON.stringify(text.slice(at, at + 12))}`);
        ids.push(index.get(piece)!);
        at += piece.length;
      }
      return ids;
    },
    idsContaining(char) {
      return pieces.filter((p) => p.includes(char)).map((p) => index.get(p)!);
    },
    decode(ids) {
      let out = '';
      for (const id of ids) if (id >= SPECIALS && id < pieces.length + SPECIALS) out += pieces[id - SPECIALS];
      return out;
    },
  };
}
