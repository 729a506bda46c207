"""θ₀ of a transformer spec in the family's flat layout (spec.param_layout), drawn as engines/families/transformer/init.ts
draws it, so InitModel gives the same bytes as the built-in engine: Philox(seed, STREAM_INIT) uniforms, U(±σ√3) for
matrices and embeddings (residual-out matrices scaled by 1/√(2·layers)), gains 1, biases 0."""
import math

import numpy as np
import torch

import philox
from spec import param_layout

SIGMA = 0.02


def init_weights(spec, seed: int) -> torch.Tensor:
    slots, total = param_layout(spec)
    u = philox.uniforms(seed, philox.STREAM_INIT, total)
    theta = np.zeros(total, dtype=np.float32)
    half = SIGMA * math.sqrt(3)
    for name, off, shape, kind in slots:
        size = int(np.prod(shape))
        if kind == "gain":
            theta[off:off + size] = 1
            continue
        a = 0.0 if kind == "bias" else (half / math.sqrt(2 * spec["layers"]) if kind == "residual-out" else half)
        theta[off:off + size] = ((2 * u[off:off + size] - 1) * a).astype(np.float32)
    return torch.from_numpy(theta)
