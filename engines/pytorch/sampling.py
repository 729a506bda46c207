"""Drawing one token from next-token logits, the way engines/onnx/ops/sampling.ts does
(inverse CDF with a Philox uniform u per token, so with equal logits both engines draw
the same token):

  greedy (temperature 0): argmax (ties → lowest id), sample_logp = 0
  plain (no top-k / top-p): q = softmax(logits / T), token = #{v : cumsum(q)_v ≤ u·Σq}
  filtered: sort descending; keep ranks < k, then rank i while Σ_{j<i} q_j < p·Σ_{top-k} q;
            rank = #{i : cumsum(q·keep)_i ≤ u·Σ(q·keep)} (clamped to the kept set)
  sample_logp = log-softmax of the distribution sampled from (renormalized over the kept set).
"""
import torch


def sample(logits: torch.Tensor, u: float, temperature: float, top_k: int, top_p: float):
    """logits [V] float32 → (token, sample_logprob)"""
    V = logits.shape[0]
    if temperature <= 0:
        return int(torch.argmax(logits).item()), 0.0
    scaled = logits / torch.tensor(temperature, dtype=logits.dtype, device=logits.device)
    uu = torch.tensor(u, dtype=logits.dtype, device=logits.device)
    k_off = top_k <= 0 or top_k >= V
    p_off = top_p <= 0 or top_p >= 1
    if k_off and p_off:
        q = torch.softmax(scaled, dim=-1)
        cum = torch.cumsum(q, dim=-1)
        tok = min(int((cum <= uu * cum[-1]).sum().item()), V - 1)
        return tok, float(torch.log_softmax(scaled, dim=-1)[tok].item())
    k_eff = V if k_off else top_k
    p_eff = 2.0 if p_off else top_p
    sorted_vals, sorted_idx = torch.sort(scaled, descending=True, stable=True)
    qs = torch.softmax(sorted_vals, dim=-1)
    ranks = torch.arange(V, device=logits.device)
    keep_k = ranks < k_eff
    zero = torch.zeros((), dtype=qs.dtype, device=qs.device)
    qk = torch.where(keep_k, qs, zero)
    cum_k = torch.cumsum(qk, dim=-1)
    tot_k = cum_k[-1]
    cum_excl = torch.cat([zero.view(1), cum_k[:-1]])
    keep = keep_k & (cum_excl < torch.tensor(p_eff, dtype=qs.dtype, device=qs.device) * tot_k)
    qm = torch.where(keep, qs, zero)
    cum_kept = torch.cumsum(qm, dim=-1)
    below = int((cum_kept <= uu * cum_kept[-1]).sum().item())
    n_keep = int(keep.sum().item())
    rank = min(below, n_keep - 1)
    kept_logq = torch.log_softmax(torch.where(keep, sorted_vals, torch.full_like(sorted_vals, float("-inf"))), dim=-1)
    return int(sorted_idx[rank].item()), float(kept_logq[rank].item())
