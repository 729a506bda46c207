#!/usr/bin/python3
"""One Update of the PyTorch engine in one process (update.run_update) and on N ranks under FSDP2 (parallel.Fsdp, the
engine's --device cpu,cpu path): wall time, peak RSS of each process, and max|Δθ|, |Δm|, |Δv| between the two.
Run each mode in its own process so each peak RSS is its own:

    PY=~/.cache/troupe/python/pytorch-engine-*/bin/python
    $PY bench/pytorch_fsdp.py --mode one       # one process
    $PY bench/pytorch_fsdp.py --mode ranks     # 2 gloo ranks (this process is rank 0), two Updates: cold, warm
    $PY bench/pytorch_fsdp.py --mode both      # both in one process, and their difference

The model is a llama-layout family spec (random θ), default 35.7M parameters (vocabulary 8,192, width
512, 8 layers); the samples are --samples sequences of 6-21 trained tokens, one sequence a micro-batch, 2 inner steps
at lr 1e-3. CPU only.
"""
import argparse
import math
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines", "pytorch"))

import torch  # noqa: E402

import hf  # noqa: E402
import parallel  # noqa: E402
import spec as specmod  # noqa: E402
from update import run_update  # noqa: E402


def peak_mb(pid=None):
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM"))


def samples_of(n, V):
    def toks(seed, k):
        x, out = seed * 2654435761, []
        for _ in range(k):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
            out.append((x >> 8) % V)
        return out
    out = []
    for i in range(n):
        t = toks(10 + i, 6 + 3 * (i % 6))
        out.append({"context": toks(20 + i, 2 + i % 6), "tokens": t, "loss_mask": [1] * len(t),
                    "advantages": [(1 if i % 2 == 0 else -1) * (0.5 + 0.1 * j) for j in range(len(t))],
                    "old_logprobs": [-math.log(V) + 0.3 * math.sin(i + j) for j in range(len(t))],
                    "loss_weights": [1 / 40] * len(t), "ref_logprobs": [-math.log(V) - 0.05] * len(t) if i < 2 else []})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("one", "ranks", "both"), default="both")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--activation-checkpointing", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    spec = specmod.normalize("transformer", a.vocab, dict(width=a.width, layers=a.layers, heads=8, kvHeads=4, maxSeq=256,
                                                          positions="rope", norm="rmsnorm", mlp="swiglu"))
    model = hf.runtime_for(spec, "cpu")
    # θ uniform ±0.02·√3 from torch's generator (InitModel's distribution, not its bytes: init.init_weights peaks at
    # several times θ in memory, which would hide the Update's own peak)
    theta = (torch.rand(model.P, generator=torch.Generator().manual_seed(42)) * 2 - 1) * (0.02 * math.sqrt(3))
    m, v = torch.zeros(model.P), torch.zeros(model.P)
    samples = samples_of(a.samples, a.vocab)
    st = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0, "clip_low": 0.2,
          "clip_high": 0.2, "dual_clip": 3.0, "kl_type": "low_var_kl", "kl_coef": 0.1, "entropy_coef": 0.01, "inner_steps": 2}
    ckpt = a.activation_checkpointing
    print(f"P {model.P} ({model.P * 4 / 1e9:.2f} GB float32), {len(samples)} samples, one a micro-batch; "
          f"peak RSS before any Update {peak_mb():.0f} MB", flush=True)
    one = two = None
    if a.mode in ("one", "both"):
        t0 = time.monotonic()
        one = run_update(model, theta, m, v, 0, samples, st, None, 1, ckpt)
        print(f"1 process: {time.monotonic() - t0:.2f} s, peak RSS {peak_mb():.0f} MB", flush=True)
    if a.mode in ("ranks", "both"):
        ranks = parallel.Fsdp(["cpu"] * a.ranks, 1)
        for run in ("cold", "warm"):
            two = None  # the cold run's result does not count in the warm run's peak
            t0 = time.monotonic()
            two = run_update(model, theta, m, v, 0, samples, st, None, 1, ckpt, ranks)
            children = ", ".join(f"{peak_mb(c.pid):.0f}" for c in ranks.children)
            print(f"{a.ranks} ranks ({run}): {time.monotonic() - t0:.2f} s, peak RSS rank 0 {peak_mb():.0f} MB, "
                  f"ranks 1.. {children} MB", flush=True)
    if one is not None and two is not None:
        for i, name in enumerate(("theta", "m", "v")):
            print(f"max|Δ{name}| {float((one[i] - two[i]).abs().max()):.2e} (max|{name}| {float(one[i].abs().max()):.2e})")


if __name__ == "__main__":
    main()
