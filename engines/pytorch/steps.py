"""The fixed shapes of a Score, prefill or decode step (hf.HfTransformer.run_rows), which keep a row's bits independent
of what runs beside it: every dense op of a step runs on BLOCK rows, or on another of STEP_SIZES where every row gets
the same bits as in a BLOCK-row step (probed per model: HfTransformer.step_sizes), and each row's attention runs in a
group of ATT_ROWS rows over the first L keys of its cache slot, L one of key_lengths() (probed per spec). Larger steps
share each op's dispatch among more rows (a prefill), smaller ones waste fewer padding rows (a decode of a few
sequences). Sizes are multiples of 16, so an element-wise op over size × width values has no scalar tail (its vector
and scalar transcendentals may differ in the last bit), and ≡ 0 or 4 (mod 6), oneDNN's AVX2 sgemm row blocking.
"""
import math

import torch

BLOCK = 64
STEP_SIZES = (16, 48, 64, 96, 112, 144, 160, 192, 208, 240, 256)
PROBE_COLUMNS = 2048  # at most this many output columns of a dense shape are probed (the vocabulary can be large)
# rows per attention group of a step: groups of padding rows are skipped, and a group's keys, values and products
# [ATT_ROWS, heads, maxSeq, headDim] bound the step's memory
ATT_ROWS = 16
# key lengths an attention group may stop at (multiples of 16, then growing by half; maxSeq itself always)
KEY_LENGTHS = tuple(range(16, 257, 16)) + (384, 576, 864, 1296, 1952, 2928, 4400, 6592, 9888, 14832, 22256, 33376)
LORA = "_lora"  # the key of a LoRA run's adapters in its inference weights dict (lora.Adapters; per step lora.RowAdapters)


def key_lengths(spec, device):
    """The KEY_LENGTHS below maxSeq, and maxSeq, at which a group's attention gives the same bits as over all maxSeq
    keys: the keys past a row's position are masked, so they add exact zeros, after the others, to the softmax's sum
    and to the values' sum, when those kernels only append them to their running sums (aten's CPU kernels do; not
    assumed: probed on random values, each length against the next, the last against maxSeq, with the spec's heads).
    maxSeq only on CUDA."""
    M = spec["maxSeq"]
    out = [M]
    if str(device) != "cpu":
        return out
    gen = torch.Generator().manual_seed(1)
    Hkv, hd, A = spec["kvHeads"], spec["headDim"], ATT_ROWS
    g = spec["heads"] // Hkv
    q = torch.randn(A, Hkv, g, 1, hd, generator=gen) * 3
    K, V = torch.randn(A, Hkv, M, hd, generator=gen), torch.randn(A, Hkv, M, hd, generator=gen)

    def attend(L, pos):
        scores = (q * K[:, :, None, :L]).sum(-1) * (1.0 / math.sqrt(hd))
        hidden = (torch.arange(L)[None, :] > pos[:, None])[:, None, None, :]
        p = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        return (p[..., None] * V[:, :, None, :L]).sum(-2)
    longer = M
    for L in sorted((n for n in KEY_LENGTHS if n < M), reverse=True):
        pos = torch.randint(0, L, (A,), generator=gen)
        pos[0] = L - 1
        if not torch.equal(attend(L, pos), attend(longer, pos)):
            break
        out.insert(0, L)
        longer = L
    return out
