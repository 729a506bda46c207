"""Philox4x32-10 counter-based PRNG, vectorized with numpy.

The same generator as engines/families/philox.ts: draw number i of (seed, stream) is
unit(philox(counter=(i // 4, 0, stream, 0), key=(seed & 0xffffffff, seed >> 32))[i % 4]),
unit(x) = (x >> 8) * 2^-24. Pure integer arithmetic, so the draws are the same bits
as the built-in engine's (init weights and sampling noise match it).
"""
import numpy as np

M0 = np.uint64(0xD2511F53)
M1 = np.uint64(0xCD9E8D57)
W0 = 0x9E3779B9
W1 = 0xBB67AE85
MASK = np.uint64(0xFFFFFFFF)
SHIFT = np.uint64(32)

STREAM_SAMPLING = 0
STREAM_INIT = 1


def seed_key(seed: int):
    if not isinstance(seed, int) or seed < 0 or seed > 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"seed must be an unsigned 64-bit integer, got {seed}")
    return seed & 0xFFFFFFFF, seed >> 32


def philox_blocks(counter0: np.ndarray, stream: int, key):
    """Four uint32 words (as uint64 arrays) per counter (c0 = counter0, c1 = 0, c2 = stream, c3 = 0)."""
    x0 = counter0.astype(np.uint64) & MASK
    x1 = np.zeros_like(x0)
    x2 = np.full_like(x0, np.uint64(stream))
    x3 = np.zeros_like(x0)
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0 = (k0 + W0) & 0xFFFFFFFF
            k1 = (k1 + W1) & 0xFFFFFFFF
        p0 = M0 * x0  # < 2^64: exact in uint64
        p1 = M1 * x2
        hi0, lo0 = p0 >> SHIFT, p0 & MASK
        hi1, lo1 = p1 >> SHIFT, p1 & MASK
        n0 = hi1 ^ x1 ^ np.uint64(k0)
        n2 = hi0 ^ x3 ^ np.uint64(k1)
        x0, x1, x2, x3 = n0, lo1, n2, lo0
    return x0, x1, x2, x3


def uniforms(seed: int, stream: int, n: int) -> np.ndarray:
    """float64 array of n uniforms in [0, 1) with 24 random bits (exact in float32)."""
    if n <= 0:
        return np.zeros(0, dtype=np.float64)
    blocks = (n + 3) // 4
    words = philox_blocks(np.arange(blocks, dtype=np.uint64), stream, seed_key(seed))
    flat = np.stack(words, axis=1).reshape(-1)[:n]
    return (flat >> np.uint64(8)).astype(np.float64) * 5.9604644775390625e-8
