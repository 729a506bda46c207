"""LoRA over the transformer (engines/families/transformer/lora.ts): a frozen base θ and, for each targeted linear map
W [in, out] (y = x·W + b), A [r, in] and B [out, r]. The targets are the family's projections of every layer (spec.py
layout, `lora.targets` q k v o 1 2 g u d), or over a transformers-layout model (spec.hf) its linear modules named as
PEFT names them (`q_proj`, `gate_up_proj`, ...: every module whose last name it is; hf.normalize), A and B then being
PEFT's lora_A / lora_B of that module as they are (spec.target_shapes, spec.adapter_layout):

  y = (x·W + b) + (α/r)·((x·Aᵀ)·Bᵀ)   PEFT's order: the base layer's output, then + lora_B(lora_A(x))·scaling

The adapter vector φ holds, per targeted matrix (the family's: per layer and target in LORA_TARGETS order; a
transformers model's: its modules' order), A then B, row-major float32; it is all a
version stores and all Update trains. Init as PEFT's: A ~ kaiming-uniform(a=√5) = U(±1/√in) from Philox(seed,
STREAM_INIT), B = 0, so version 0 scores as the base.

Generate and Score run the adapter UNMERGED, each row with its own: the inference weights dict is the base's (its oneDNN
memo and kernels) plus, under steps.LORA, the run's Adapters: the φ of every adapter in the run (different models of
one LoRA spec over one base, or different versions of one), and the adapter of each cache slot. Each step of
hf.HfTransformer.run_rows takes its rows' adapters by slot (Adapters.rows); each targeted module then adds (a forward
hook), to the base output
of all the step's rows, RowAdapters.delta: per row its own A and B gathered ([rows, r, in], [rows, out, r]) and two
batched matmuls (torch.bmm, one [1, in]·[in, r] and one [1, r]·[r, out] product per row). Every row's LoRA product
has the same shape, on its own values only, whichever adapters share the step; the base part is the base's
(row-invariant, steps.py), the rest element-wise: a row's bits do not depend on the other rows or their adapters,
so Score = Generate and batch invariance hold across a mix of adapters. The cost is r·(in + out) multiply-adds per
row per target, and the gathered A and B (memory.step_bytes).

Update trains through the merge (weights(φ) without `inference`): each targeted W becomes W + (α/r)·Aᵀ·Bᵀ once per
run, autograd reaches A and B through it (the base is a constant), and the update runs the base's kernels on a plain
weights dict. Its results are not compared bit for bit with Score (its own scoring of the samples, for the log-prob
gap, is Score's unmerged path).
"""
import math

import numpy as np
import torch

import philox
from steps import LORA
from spec import adapter_layout


def init_adapter(spec, seed: int) -> torch.Tensor:
    """φ₀: A ~ U(±1/√in) (Philox uniforms at the slot's offsets), B = 0."""
    slots, total = adapter_layout(spec)
    u = philox.uniforms(seed, philox.STREAM_INIT, total)
    phi = np.zeros(total, dtype=np.float32)
    for name, off, shape, _ in slots:
        if name.endswith(".A"):
            size = shape[0] * shape[1]
            phi[off:off + size] = ((2 * u[off:off + size] - 1) * (1 / math.sqrt(shape[1]))).astype(np.float32)
    return torch.from_numpy(phi)


class Adapters:
    """The adapters of one Score or Generate run over one base: per targeted matrix (base slot name) every adapter's
    Aᵀ [K, in, r] and Bᵀ [K, r, out], stacked once per run (so a step gathers its rows' with one index_select), and
    `slots`: the adapter index of each cache slot (set by Generate as sequences take slots; None: every slot uses
    adapter 0, a Score run)."""

    def __init__(self, model, phis):
        self.scale = model.scale
        self.n = len(phis)
        self.slots = None
        self.targets = {}
        for name, off, shape, w in model.slots:
            views = [phi[off:off + shape[0] * shape[1]].view(shape).t() for phi in phis]
            self.targets.setdefault(w, [None, None])[0 if name.endswith(".A") else 1] = torch.stack(views).contiguous()

    def rows(self, block):
        """The adapters of a step's rows (token, position, slot): its slot's (a padding row reads slot 0)."""
        ids = [0] * len(block) if self.slots is None else [self.slots[r[2]] for r in block]
        return RowAdapters(self, torch.tensor(ids, dtype=torch.long))


class RowAdapters:
    """One step's rows, each with its adapter index."""

    def __init__(self, adapters, ids):
        self.adapters = adapters
        self.ids = ids

    def delta(self, x, w):
        """(α/r)·((x·A_rowᵀ)·B_rowᵀ) for x [rows, ..., in] and the targeted matrix `w`, or None when `w` is not targeted.
        A and B are gathered per row and multiplied by torch.bmm: each row's product has the same shape whatever the mix."""
        t = self.adapters.targets.get(w)
        if t is None:
            return None
        At, Bt = t
        n = len(self.ids)
        A = At.index_select(0, self.ids)  # [rows, in, r]
        B = Bt.index_select(0, self.ids)  # [rows, r, out]
        h = torch.bmm(x.reshape(n, -1, x.shape[-1]).contiguous(), A)  # lora_A(x) [rows, ·, r]
        u = torch.bmm(h, B)  # lora_B(·) [rows, ·, out]
        return (u * self.adapters.scale).view(*x.shape[:-1], B.shape[2])


class LoraModel:
    """A Transformer whose weights() takes the adapter φ; everything else is the base runtime's (shared by every adapter
    of that shape). `base` is the frozen θ, shared by every adapter over the same base version (the engine's cache)."""

    def __init__(self, spec, runtime, base):
        self.spec = spec
        self.runtime = runtime
        self.base = base
        self.slots, self.P = adapter_layout(spec)
        self.scale = float(np.float32(spec["lora"]["alpha"] / spec["lora"]["rank"]))

    def __getattr__(self, name):  # forward_rows, decode_batch, trunk, head, new_cache, device, ...
        return getattr(self.runtime, name)

    def weights(self, phi: torch.Tensor, inference=False):
        """Inference (Score, Generate of one adapter): the base's weights and φ unmerged (adapters()). Otherwise (Update)
        the base's weights with every target merged, differentiable in φ: W + (α/r)·Aᵀ·Bᵀ for the family's [in, out]
        slots, W + (α/r)·B·A for a transformers module's [out, in] weight."""
        if inference:
            return self.adapters([phi])
        hf = "hf" in self.spec
        W = self.runtime.weights(self.base) if hf else self.runtime.slot_weights(self.base)
        # the slots tile φ in order: one split, whose backward is one concatenation
        pieces = phi.split([shape[0] * shape[1] for _, _, shape, _ in self.slots])
        for (name, _, shape, w), piece in zip(self.slots, pieces):
            if name.endswith(".A"):
                A = piece.view(shape)
            elif hf:
                W[w + ".weight"] = W[w + ".weight"] + self.scale * (piece.view(shape) @ A)  # [out, r]·[r, in]
            else:
                W[w] = W[w] + self.scale * (A.t() @ piece.view(shape).t())  # [in, r]·[r, out]
        return W if hf else self.runtime.assemble(W)

    def adapters(self, phis):
        """The inference weights of a run over this base with the adapters `phis` (each φ of this spec): the base's,
        with W[steps.LORA] the run's Adapters (set its `slots` to give each cache slot its adapter's index)."""
        W = self.runtime.weights(self.base, inference=True)
        W[LORA] = Adapters(self, phis)
        return W
