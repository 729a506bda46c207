/** vocabTokenizer: longest piece first, ids after the three specials, hand-computed. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { vocabTokenizer } from '../../../agents/tokenizer';

describe('vocabTokenizer', () => {
  const tok = vocabTokenizer(['a', 'b', 'ab', '<call/>', '<', '>']);
  it('encodes the longest piece at each position; decodes back; ids start after PAD, BOS, EOS', () => {
    assert.equal(tok.size, 9);
    // 'ab' (id 5) before 'a' (3) and 'b' (4); '<call/>' (6) whole; a lone '<' (7)
    assert.deepEqual(tok.encode('abab<call/>a<b'), [5, 5, 6, 3, 7, 4]);
    assert.equal(tok.decode([1, 5, 5, 6, 3, 7, 4, 2]), 'abab<call/>a<b');
    assert.deepEqual(tok.idsContaining('>'), [6, 8]);
  });
  it('names what no piece matches, and refuses duplicate or empty pieces', () => {
    assert.throws(() => tok.encode('abc'), /no piece of the vocabulary matches "c"/);
    assert.throws(() => vocabTokenizer(['a', 'a']), /duplicate piece "a"/);
    assert.throws(() => vocabTokenizer(['']), /an empty piece/);
  });
});
