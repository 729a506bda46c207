/**
 * The team's tokenizer: text <-> token ids for the built-in policy. Character
 * level, so text round-trips exactly and a small vocabulary keeps RL from a
 * random initialization feasible. Ids 0..2 are the special tokens.
 */
export interface Tokenizer {
  readonly kind: 'chars';
  readonly chars: string;
  readonly size: number;
  readonly padId: number;
  readonly bosId: number;
  readonly eosId: number;
  encode(text: string): number[];
  decode(ids: readonly number[]): string;
}

export const PAD = 0;
export const BOS = 1;
export const EOS = 2;
const SPECIALS = 3;

export function charTokenizer(chars: string): Tokenizer {
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
    decode(ids) {
      let out = '';
      for (const id of ids) if (id >= SPECIALS && id < list.length + SPECIALS) out += list[id - SPECIALS];
      return out;
    },
  };
}
