"""LoRA over the transformer (engines/families/transformer/lora.ts): a frozen base θ (spec.py layout) and, for each
targeted linear map W [in, out] of every layer (y = x·W), A [r, in] and B [out, r]:

  y = x·W + (α/r)·(x·Aᵀ)·Bᵀ,  so the layer runs with the merged W + (α/r)·Aᵀ·Bᵀ

The adapter vector φ holds, per layer and per target (LORA_TARGETS order), A then B, row-major float32; it is all a
version stores and all Update trains (autograd reaches A and B through the merge; the base is a constant). Init as
PEFT's: A ~ kaiming-uniform(a=√5) = U(±1/√in) from Philox(seed, STREAM_INIT), B = 0, so version 0 scores as the base.

The merge happens once per device run (weights()), so Generate, Score and Update run the base's kernels on a
plain weights dict: every bit-identity the base has (Score = Generate, batch invariance) holds for the adapter.
The cost is r·in·out multiply-adds per targeted matrix per run; a batch holds one adapter.
"""
import math

import numpy as np
import torch

import philox
from spec import adapter_layout, base_spec, param_layout


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
        W = self.runtime.weights(self.base, inference)
        for name, off, shape, w in self.slots:
            if name.endswith(".A"):
                A = phi[off:off + shape[0] * shape[1]].view(shape)
            else:
                B = phi[off:off + shape[0] * shape[1]].view(shape)
                W[w] = W[w] + self.scale * (A.t() @ B.t())  # [in, r]·[r, out]
        return W

    def merged(self, phi: torch.Tensor) -> torch.Tensor:
        """The base θ with every target merged: a plain transformer's weights (export)."""
        theta = self.base.clone()
        W = self.weights(phi)
        for name, off, shape, _ in param_layout(base_spec(self.spec))[0]:
            theta[off:off + int(np.prod(shape))] = W[name].reshape(-1)
        return theta
