"""Memory a transformer spec needs in this engine, from its shapes (float32, 4 bytes a value), and the fit
of a spec into the engine's budget: a spec whose smallest run cannot fit is refused at InitModel /
LoadVersion naming the field that dominates, as the built-in engine does
(engines/families/transformer/memory.ts; the terms differ where this engine's runs differ).

With P parameters, D width, F mlp width, H heads, Dq = heads·headDim, Dkv = kvHeads·headDim, L layers,
V vocabulary, S the sequence length (context + tokens); T = 8·D + 2·Dq + 2·Dkv + n·(Dq + Dkv), n = 2 with qkNorm
(the normalized q, k and their x̂) else 0, is 10·D + 2·Dkv when headDim = width / heads and no qkNorm:

  state     = 4·P·8: θ, AdamW m, v of the base; θ, m, v of the new version; gradient; clipped gradient
              (a LoRA spec: 4·(P + 2·Pt + 8·Pa), Pt the targeted matrices' values, Pa the adapter's: the base θ
              once, an Update's merged targets and their gradient, and the 8 copies above of the adapter only;
              Score and Generate run the adapters unmerged: no copy of a target)
  update    = 4·[S·(L + 1)·(T + 2·H·S + k·F) + 3·min(S, c)·V] bytes per sequence: the values
              autograd keeps per layer and token (h, norm outputs, q, k, v, ctx, h1; scores and
              probabilities; MLP pre-activations and activation, k = 3 GELU, 4 SwiGLU), one more layer of
              backward transients, and one checkpointed chunk of c = head_chunk_rows(V) rows'
              logits, log-softmax and their gradient (the head runs over chunks of rows)
  step      = 4·[B·(T + k·F + 3·V) + A·M·(2·Dkv + Dq + 3·H)]: one Score / Generate step (hf.HfTransformer.run_rows) of
              B rows (steps.BLOCK; up to max(steps.STEP_SIZES) when memory allows) at M = maxSeq: per row the
              transients above (no attention term), its logits,
              log-softmax and exp; per attention group of A = steps.ATT_ROWS rows each row's keys and values of its
              slot, the query·key products and the scores, masked scores and probabilities; a LoRA spec adds per row
              + r·(in + out) + 2·out for its largest target [in, out]: that target's A and B gathered for the row
              (lora.RowAdapters.delta, one target at a time) and its adapter term before and after the scaling
  slot      = 4·2·L·Dkv·M: the keys and values of one sequence (a cache slot of Score and Generate)

Update runs one micro-batch (micro_batch_rows, at least one sequence) at a time, Score and Generate one step beside
their slots' caches (max_batch slots, fewer when memory is short), so a spec fits when state + the larger of one
sequence's update at S = maxSeq and a step of BLOCK rows with one slot fits in the budget;
otherwise SpecTooLarge names `maxSeq` when the per-sequence term dominates, else `vocabSize` when embeddings and head
hold most parameters, else `width`.
"""
import os

from steps import ATT_ROWS, BLOCK, STEP_SIZES
from spec import adapter_layout, head_dim, param_layout, target_shapes

F32 = 4
STATE_COPIES = 8
HEAD_CHUNK_BYTES = 16 * 2 ** 20  # one [rows, V] tensor of Update's head chunks, as the built-in engine's (onnx/transformer/head.ts)


class SpecTooLarge(Exception):
    def __init__(self, field, message):
        super().__init__(f"{field}: {message}")
        self.field = field


def state_bytes(s):
    P = s["params"] if "hf" in s else param_layout(s)[1]  # a transformers spec (hf.py): its module's parameter count
    if "lora" not in s:
        return F32 * STATE_COPIES * P
    targeted = sum(i * o for _, i, o in target_shapes(s))
    return F32 * (P + 2 * targeted + STATE_COPIES * adapter_layout(s)[1])


def _per_layer_token(s, S, attention_copies):
    dq = s["heads"] * head_dim(s)
    dkv = s["kvHeads"] * head_dim(s)
    mlp = (3 if s["mlp"] == "gelu" else 4) * s["mlpWidth"]
    qk_norm = 2 * (dq + dkv) if s["qkNorm"] else 0
    return 8 * s["width"] + 2 * dq + 2 * dkv + qk_norm + attention_copies * s["heads"] * S + mlp


def head_chunk_rows(V):
    """Rows per chunk of Update's head: one [rows, V] float32 tensor in HEAD_CHUNK_BYTES (at least 1)."""
    return max(1, HEAD_CHUNK_BYTES // (F32 * V))


def update_bytes_per_sequence(s, S, checkpointed=False):
    """Activation bytes one Update sequence of S tokens holds. Checkpointed (--activation-checkpointing), autograd keeps
    each layer's input (S·D) and recomputes one layer at a time in the backward: two layers' worth of transients."""
    V = s["vocabSize"]
    head = 3 * min(S, head_chunk_rows(V)) * V
    if checkpointed:
        return F32 * (S * s["layers"] * s["width"] + 2 * S * _per_layer_token(s, S, 2) + head)
    return F32 * (S * (s["layers"] + 1) * _per_layer_token(s, S, 2) + head)


def micro_batch_rows(s, rows, S, micro_batch_bytes, checkpointed=False):
    """Sequences per Update micro-batch: as many as `micro_batch_bytes` holds at S tokens (at least 1, at most the
    batch), the built-in engine's rule (updateMicroBatchRows) with this engine's per-sequence bytes. It depends only on
    the batch's size and length, the spec and the setting, so the split, and the update's bits, are reproducible."""
    return max(1, min(rows, micro_batch_bytes // update_bytes_per_sequence(s, S, checkpointed)))


def step_bytes(s, rows=BLOCK):
    """One run_rows step of `rows` rows, their attention in groups of ATT_ROWS rows over maxSeq keys."""
    M, H = s["maxSeq"], s["heads"]
    dq, dkv = H * head_dim(s), s["kvHeads"] * head_dim(s)
    return F32 * (rows * (_per_layer_token(s, 0, 0) + 3 * s["vocabSize"] + lora_row_values(s)) + ATT_ROWS * M * (2 * dkv + dq + 3 * H))


def lora_row_values(s):
    """Values a step's row holds for its own LoRA adapter (0 without lora): the largest target's A [r, in] and B [out, r]
    gathered per row for the batched matmuls, and its [out] adapter term, before and after the scaling."""
    if "lora" not in s:
        return 0
    r = s["lora"]["rank"]
    return max(r * (i + o) + 2 * o for _, i, o in target_shapes(s))


def slot_bytes(s):
    """One cache slot of Score and Generate: keys and values of maxSeq positions in every layer."""
    return F32 * 2 * s["layers"] * s["kvHeads"] * head_dim(s) * s["maxSeq"]


def run_slots(s, budget, max_batch):
    """Cache slots of a Score or Generate run: max_batch, fewer when their caches would not fit
    beside the state and one step (at least 1). Fixed per spec and budget; a row's bits do not depend on it."""
    free = budget - state_bytes(s) - step_bytes(s)
    return max(1, min(max_batch, free // slot_bytes(s)))


def step_rows(s, budget, slots):
    """The most rows a step of a run with `slots` cache slots may hold: the largest of STEP_SIZES that fits beside the
    state and the slots, at least BLOCK (run_rows takes the largest of its probed sizes up to it)."""
    free = budget - state_bytes(s) - slots * slot_bytes(s)
    return max([BLOCK] + [n for n in STEP_SIZES if step_bytes(s, n) <= free])


def check_fits(s, budget, prefix="spec"):
    """Raise SpecTooLarge when one sequence of maxSeq tokens cannot run beside the state within `budget` bytes."""
    state = state_bytes(s)
    run = max(update_bytes_per_sequence(s, s["maxSeq"]), step_bytes(s) + slot_bytes(s))
    if state + run <= budget:
        return
    if "hf" in s:
        total, embeddings = s["params"], s["vocabSize"] * s["width"]
    else:
        slots, total = param_layout(s)
        embeddings = sum(_size(shape) for name, _, shape, kind in slots if kind == "embedding" or name == "head")
    field = "maxSeq" if run >= state else ("vocabSize" if embeddings * 2 >= total else "width")

    def gib(b):
        return f"{b / 2 ** 30:.2f} GiB"
    raise SpecTooLarge(
        f"{prefix}.{field}",
        f"needs ~{gib(state + run)} (weights and AdamW state {gib(state)}, 1 sequence of maxSeq {s['maxSeq']} {gib(run)}) "
        f"but the engine's memory budget is {gib(budget)} (reduce {field}, or raise the budget: --memory-bytes / TROUPE_ENGINE_MEMORY_BYTES)")


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def default_budget(device):
    """What the device can give: a GPU's total memory; on CPU MemAvailable (other processes count) plus what this
    process already holds, else 80% of physical memory."""
    if device.startswith("cuda"):
        import torch
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    try:
        def kb(path, field):
            with open(path) as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1]) * 1024
            raise ValueError(field)
        return kb("/proc/meminfo", "MemAvailable") + kb("/proc/self/status", "VmRSS")
    except (OSError, ValueError):
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
