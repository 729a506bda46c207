"""Keys and values of finished Generate sequences, kept for the next turn of their episode.

An agent's next turn sends its whole history again (the last context, the tokens it generated, the tool's or the other
agents' replies), so its context starts with a sequence this engine ran a moment ago. Generate keeps each finished
sequence's keys and values by (model identity, tokens) and a later sequence of the same model whose context starts with
them copies those rows into its cache slot instead of running them (generation.Generation._generate_batch).

The reuse is exact: a row's keys and values depend only on its own token, position and the keys before it, never on the
step it ran in or what ran beside it (the row steps' batch invariance, steps.py), so a reused row holds the bits its own
prefill would have written and a sequence's tokens and log-probs are those it gets without the cache.

Lookup follows vLLM's prefix caching in spirit, by blocks of BLOCK tokens: an entry is indexed by the chained hash of
each of its whole blocks, a context walks its own blocks' hashes to the deepest one indexed, and of the entries holding
that block the one that goes on matching furthest into the next block wins (checked token by token: a hash is not
proof). A finished sequence whose tokens extend a whole entry (its episode's next turn) replaces it. Entries are evicted
least recently used first past the budget; an entry of an older version is never found again (the identity names the
version's weights) and ages out.
"""
import collections

BLOCK = 16


def _block_hashes(tokens, n_blocks):
    """The chained hash of tokens[:16], tokens[:32], ... (n_blocks of them)."""
    out, h = [], 0
    for b in range(n_blocks):
        h = hash((h, tuple(tokens[b * BLOCK:(b + 1) * BLOCK])))
        out.append(h)
    return out


class Entry:
    __slots__ = ("ident", "tokens", "kv", "bytes", "keys")

    def __init__(self, ident, tokens, kv, size):
        self.ident = ident
        self.tokens = tokens  # tuple: the positions whose keys and values `kv` holds
        self.kv = kv  # per layer (k, v), each [kvHeads, len(tokens), headDim]
        self.bytes = size
        self.keys = []  # its index keys


class PrefixCache:
    def __init__(self, budget_bytes):
        self.budget = max(0, int(budget_bytes))
        self.entries = collections.OrderedDict()  # (ident, tokens) -> Entry, least recently used first
        self.index = {}  # (ident, chained block hash) -> {id(entry): entry} of the entries holding that block
        self.bytes = 0

    def lookup(self, ident, ctx):
        """(entry, n): the entry whose first n tokens are ctx's first n, n as large as the cache allows and at most
        len(ctx) - 1 (the context's last row runs: its logits draw the first token); (None, 0) when none."""
        if self.budget == 0 or len(ctx) < BLOCK + 1:
            return None, 0
        best, n = self._match(ident, tuple(ctx), len(ctx) - 1)
        if best is not None:
            self.entries.move_to_end((ident, best.tokens))
        return best, n

    def _match(self, ident, ctx, limit):
        """The entry sharing the longest prefix (at most `limit` tokens) with the tuple ctx, and its length."""
        deepest, L = None, 0
        for b, h in enumerate(_block_hashes(ctx, limit // BLOCK)):
            held = self.index.get((ident, h))
            if held is None:
                break
            deepest, L = held, (b + 1) * BLOCK
        best, n = None, 0
        # every entry holding the deepest block (a group's turns share their prompt's blocks and part of the next)
        for e in (deepest or {}).values():
            if e.tokens[:L] != ctx[:L]:  # a hash is not proof
                continue
            m, most = L, min(len(e.tokens), limit)
            while m < most and e.tokens[m] == ctx[m]:
                m += 1
            if m > n:
                best, n = e, m
        return best, n

    def put(self, ident, tokens, kv):
        """Keep a copy of `kv` (per layer (k, v) [kvHeads, len(tokens), headDim], views of a run's cache slot) for
        `tokens`; nothing is copied when the cache would not keep it."""
        tokens = tuple(tokens)
        if self.budget == 0 or len(tokens) < BLOCK:
            return
        key = (ident, tokens)
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if size > self.budget:
            return
        e = Entry(ident, tokens, [(k.clone(), v.clone()) for k, v in kv], size)
        prefix, n = self._match(ident, tokens, len(tokens))
        if prefix is not None and n == len(prefix.tokens):  # the episode's last turn: this one holds all of it
            self._remove((ident, prefix.tokens))
        self.entries[key] = e
        self.bytes += e.bytes
        for h in _block_hashes(tokens, len(tokens) // BLOCK):
            self.index.setdefault((ident, h), {})[id(e)] = e
            e.keys.append((ident, h))
        while self.bytes > self.budget:
            self._evict()

    def _evict(self):
        self._remove(next(iter(self.entries)))

    def _remove(self, key):
        e = self.entries.pop(key)
        self.bytes -= e.bytes
        for k in e.keys:
            held = self.index[k]
            del held[id(e)]
            if not held:
                del self.index[k]
