"""One training update (UpdateRequest) with autograd, float32: the objective of
engines/onnx/ops/objective.ts + policy-loss.ts and the optimizer of adamw.ts.

Per trained token t (loss mask 1), with logp_t = log π(token_t) at the step's weights:
  log_ratio = clamp(logp − old, −20, 20), ratio = exp(log_ratio)
  L1 = −A·ratio, L2 = −A·clamp(ratio, 1−ε_low, 1+ε_high), L = L2 if L2 > L1 else L1
  dual clip (A < 0 and L > −A·c): L = −A·c
  KL (only with ref log-probs): k1 = logp − ref; k3 = clamp(e^x − x − 1, −10, 10), x = clamp(ref − logp, −20, 20)
  loss = Σ_t w_t (L_t + kl_coef·KL_t) − entropy_coef·Σ_t w_t H_t   (no further normalization)
Then global-norm clipping g ← g·min(1, max_norm / (‖g‖ + 1e−6)) and AdamW:
  θ ← θ·(1 − lr·wd); m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²;
  θ ← θ − step_size·m / (√v / bc2_sqrt + eps), step_size = lr / (1 − β1^t), bc2_sqrt = √(1 − β2^t)
(the two per-step constants in float64 on the host, rounded to float32, as adamw.ts does).

Micro-batches: the batch is cut into consecutive groups of memory.micro_batch_rows sequences (--micro-batch-bytes),
each padded to the whole batch's length; per inner step each group's loss is backpropagated in turn and the gradients
add up in one buffer, in group order. The loss is a plain sum over tokens, so the sum of the groups' gradients is the
batch's gradient; only the order of the additions changes with the split, which is fixed by the batch, the spec and
the setting, so an update is bitwise repeatable. With `checkpoint_layers` each layer's activations are recomputed in
the backward (same kernels, same bits) instead of kept.
"""
import math

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from memory import head_chunk_rows, micro_batch_rows


class NonFiniteUpdate(Exception):
    def __init__(self, step, loss, grad_norm, message):
        super().__init__(message)
        self.step = step
        self.loss = loss
        self.grad_norm = grad_norm


METRIC_NAMES = ["loss", "pg_loss", "kl_loss", "grad_norm", "clip_fraction", "approx_kl", "entropy", "dual_clip_fraction", "entropy_sum"]


def f32(x):
    return float(np.float32(x))


def grid_length(samples):
    """Positions a sample grid needs: the longest context + tokens, less the last token (it is never an input)."""
    return max(1, max(len(s["context"]) + len(s["tokens"]) - 1 for s in samples))


def build_batch(samples, device, S=None):
    """Right-padded [B, S] tokens and, for each trained token, its grid row and loss inputs."""
    B = len(samples)
    S = S or grid_length(samples)
    tokens = torch.zeros(B, S, dtype=torch.long)
    rows, targets, adv, old, w, ref, has_ref = [], [], [], [], [], [], []
    for b, s in enumerate(samples):
        full = list(s["context"]) + list(s["tokens"])
        if len(full) > 1:
            tokens[b, : len(full) - 1] = torch.tensor(full[:-1], dtype=torch.long)
        C = len(s["context"])
        for t, tok in enumerate(s["tokens"]):
            if s["loss_mask"][t] != 1:
                continue
            rows.append(b * S + C - 1 + t)
            targets.append(tok)
            adv.append(s["advantages"][t])
            old.append(s["old_logprobs"][t])
            w.append(s["loss_weights"][t])
            if s["ref_logprobs"]:
                ref.append(s["ref_logprobs"][t])
                has_ref.append(True)
            else:
                ref.append(0.0)
                has_ref.append(False)

    def f(xs):
        return torch.tensor(xs, dtype=torch.float32, device=device)

    return {
        "tokens": tokens.to(device),
        "rows": torch.tensor(rows, dtype=torch.long, device=device),
        "targets": torch.tensor(targets, dtype=torch.long, device=device),
        "adv": f(adv),
        "old": f(old),
        "w": f(w),
        "ref": f(ref),
        "has_ref": torch.tensor(has_ref, dtype=torch.bool, device=device),
        "n": len(rows),
    }


def _row_terms(head, x, targets, V):
    """log π(target) and the entropy of rows x [c, D] through head(x) → logits."""
    logp = torch.log_softmax(head(x), dim=-1)  # [c, V]
    # log π(target) by a one-hot sum (exact: one non-zero term), not gather, whose backward is a scatter-add
    # without a deterministic CUDA kernel
    onehot = torch.nn.functional.one_hot(targets, V).to(logp.dtype)
    return (logp * onehot).sum(dim=-1), -(torch.exp(logp) * logp).sum(dim=-1)


def row_terms(trunk, head, batch, V):
    """(log π(target), entropy) [N] of a batch's trained rows: trunk(tokens [B, S]) → hidden states [B, S, D] and
    head(x [c, D]) → logits [c, V] (the one rule of both Update paths: objective here, the FSDP module of parallel.py)."""
    h = trunk(batch["tokens"])
    rows = h.reshape(-1, h.shape[-1])[batch["rows"]]  # [N, D]
    c = head_chunk_rows(V)
    # The head over chunks of c rows, each checkpointed: its [c, V] values (logits, log-softmax, one-hot) are freed
    # after the chunk and recomputed, one chunk at a time, in the backward, so no [N, V] tensor exists. Rows are
    # independent through the head; the chunking is fixed by N and V, so the gradient's bits are reproducible.
    parts = [checkpoint(lambda x, t: _row_terms(head, x, t, V), rows[c0:c0 + c], batch["targets"][c0:c0 + c], use_reentrant=False)
             for c0 in range(0, max(batch["n"], 1), c)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def objective(model, theta, batch, st, checkpoint_layers=False):
    """(loss tensor, sums: a dict of floats) at θ. The sums add over micro-batches; metrics() makes the step's metrics."""
    W = model.weights(theta)
    lp, H = row_terms(lambda tokens: model.trunk(W, tokens, checkpoint_layers=checkpoint_layers), lambda x: model.head(W, x),
                      batch, model.spec["vocabSize"])
    return policy_loss(lp, H, batch, st)


def policy_loss(lp, H, batch, st):
    """(loss tensor, sums) of a batch's rows from their log-probs lp and entropies H (the formulas above)."""
    dev = lp.device

    def c(v):
        return torch.tensor(v, dtype=torch.float32, device=dev)

    adv, old, w = batch["adv"], batch["old"], batch["w"]
    diff = lp - old
    log_ratio = torch.clamp(diff, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    neg_a = -adv
    l1 = neg_a * ratio
    l2 = neg_a * torch.clamp(ratio, 1 - st["clip_low"], 1 + st["clip_high"])
    use_l2 = l2 > l1
    l_clip = torch.where(use_l2, l2, l1)
    l3 = neg_a * c(st["dual_clip"])
    dual_on = (adv < 0) & (l_clip > l3)
    l_pg = torch.where(dual_on, l3, l_clip)
    if st["kl_type"] == "k1":
        kl_raw = lp - batch["ref"]
    else:
        xr = torch.clamp(batch["ref"] - lp, -20.0, 20.0)
        kl_raw = torch.clamp(torch.exp(xr) - xr - 1, -10.0, 10.0)
    kl = torch.where(batch["has_ref"], kl_raw, torch.zeros_like(kl_raw))
    weighted_loss = w * (l_pg + c(st["kl_coef"]) * kl)
    entropy_sum = (w * H).sum()
    loss = weighted_loss.sum() - c(st["entropy_coef"]) * entropy_sum
    with torch.no_grad():
        row_mask = (w != 0).to(torch.float32)

        def masked(x):
            return float((row_mask * x).sum().item())

        sums = {
            "loss": float(loss.item()),
            "pg_loss": float((w * l_pg).sum().item()),
            "kl_loss": float((w * kl).sum().item()),
            "entropy_sum": float(entropy_sum.item()),
            "clip_fraction": masked((use_l2 & ~dual_on).to(torch.float32)),
            "dual_clip_fraction": masked(dual_on.to(torch.float32)),
            "approx_kl": masked((ratio - 1) - log_ratio),
            "entropy": masked(H),
            "rows": float(row_mask.sum().item()),
        }
    return loss, sums


MEANS = ("clip_fraction", "dual_clip_fraction", "approx_kl", "entropy")
SUM_KEYS = ("loss", "pg_loss", "kl_loss", "entropy_sum", *MEANS, "rows")


def add_sums(total, sums):
    return sums if total is None else {k: total[k] + sums[k] for k in total}


def metrics(sums):
    """A step's metrics from its micro-batches' summed terms: sums stay sums, the rest are means over weighted rows."""
    n_rows = max(sums["rows"], 1.0)
    return {k: (v / n_rows if k in MEANS else v) for k, v in sums.items() if k != "rows"}


def micro_batch_plan(spec, samples, S, micro_batch_bytes, checkpoint_layers=False):
    """The samples in consecutive micro-batches of memory.micro_batch_rows sequences (None: one micro-batch)."""
    if not samples:
        return []
    per = len(samples) if micro_batch_bytes is None else micro_batch_rows(spec, len(samples), S, micro_batch_bytes, checkpoint_layers)
    return [samples[i:i + per] for i in range(0, len(samples), per)]


def gradient(model, theta, batches, st, checkpoint_layers=False):
    """(∇loss, sums) at θ over `batches`: backward() adds each micro-batch's gradient into one buffer, in order."""
    th = theta.detach().clone().requires_grad_(True)
    sums = dict.fromkeys(SUM_KEYS, 0.0)
    for batch in batches:
        if batch["n"] == 0:
            continue  # no trained token: its gradient and sums are zeros
        loss, mb = objective(model, th, batch, st, checkpoint_layers)
        loss.backward()
        sums = add_sums(sums, mb)
    return (th.grad.detach() if th.grad is not None else torch.zeros_like(theta)), sums


def run_update(model, theta, m, v, step, samples, st, on_step=None, micro_batch_bytes=None, checkpoint_layers=False, parallel=None):
    """K = inner_steps AdamW steps on the whole batch, its gradient summed over micro-batches of at most
    `micro_batch_bytes` of activations (None: one micro-batch); over the ranks of `parallel` (parallel.py: FSDP2)
    when given. Returns (theta, m, v, step, [metrics per step], trained tokens). Inputs are not modified; raises
    NonFiniteUpdate."""
    S = grid_length(samples)
    ntok = sum(sum(1 for x in s["loss_mask"] if x == 1) for s in samples)
    if parallel is not None:
        return (*parallel.update(model, theta, m, v, step, samples, st, on_step, micro_batch_bytes, checkpoint_layers, S), ntok)
    batches = [build_batch(b, model.device, S) for b in micro_batch_plan(model.spec, samples, S, micro_batch_bytes, checkpoint_layers)]

    def gradient_at(th):
        return gradient(model, th, batches, st, checkpoint_layers)
    return (*_steps(model, theta, m, v, step, st, on_step, gradient_at), ntok)


def _steps(model, theta, m, v, step, st, on_step, gradient_at):
    device = model.device
    theta = theta.clone()
    m = m.clone()
    v = v.clone()
    lr, b1, b2 = f32(st["lr"]), f32(st["beta1"]), f32(st["beta2"])

    def c(x):
        return torch.tensor(f32(x), dtype=torch.float32, device=device)

    max_norm = c(st["max_grad_norm"]) if st["max_grad_norm"] > 0 else c(float("inf"))
    steps = []
    for k in range(st["inner_steps"]):
        t = step + k + 1
        g, sums = gradient_at(theta)
        step_metrics = metrics(sums)
        norm = torch.sqrt((g * g).sum())
        step_metrics["grad_norm"] = float(norm.item())
        steps.append(step_metrics)
        if not math.isfinite(step_metrics["loss"]) or not math.isfinite(step_metrics["grad_norm"]):
            raise NonFiniteUpdate(k, step_metrics["loss"], step_metrics["grad_norm"], f"inner step {k}")
        coef = torch.clamp(max_norm / (norm + c(1e-6)), max=1.0)
        step_size = c(lr / (1 - math.pow(b1, t)))
        bc2 = c(math.sqrt(1 - math.pow(b2, t)))
        # in place, in the order of the formulas above: the same element-wise operations on the same operands (so the
        # same bits) without a fresh θ-sized tensor per operation; g is this step's own gradient, buf one scratch
        g.mul_(coef)  # g·coef
        theta.mul_(c(1) - c(lr) * c(st["weight_decay"]))  # θ·(1 − lr·wd)
        buf = torch.mul(g, c(1) - c(b1))
        m.mul_(c(b1)).add_(buf)  # β1·m + (1−β1)·g
        torch.mul(g, g, out=buf).mul_(c(1) - c(b2))
        v.mul_(c(b2)).add_(buf)  # β2·v + (1−β2)·g²
        torch.sqrt(v, out=buf).div_(bc2).add_(c(st["eps"]))  # √v / bc2 + eps
        theta.sub_(torch.div(m, buf, out=buf).mul_(step_size))  # θ − step_size·(m / ·)
        del g, buf
        if on_step:
            on_step(k + 1)
    if not bool(torch.isfinite(theta).all()):
        raise NonFiniteUpdate(len(steps) - 1, steps[-1]["loss"], steps[-1]["grad_norm"], "final weights")
    return theta.detach(), m, v, step + st["inner_steps"], steps
