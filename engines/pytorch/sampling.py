"""Drawing the next token of several sequences from their next-token logits, the way engines/onnx/ops/sampling.ts does
for one (inverse CDF with a Philox uniform u per token, so with equal logits both engines draw the same token):

  greedy (temperature 0): argmax (ties → lowest id), sample_logp = 0
  plain (no top-k / top-p): q = softmax(logits / T), token = #{v : cumsum(q)_v ≤ u·Σq}
  filtered: sort descending; keep ranks < k, then rank i while Σ_{j<i} q_j < p·Σ_{top-k} q;
            rank = #{i : cumsum(q·keep)_i ≤ u·Σ(q·keep)} (clamped to the kept set)
  sample_logp = log-softmax of the distribution sampled from (renormalized over the kept set).

Rows are independent: every op is element-wise or runs along a row (softmax, cumsum, sort, sums), so a row draws the
same token and sample_logp alone or beside others.
"""
import torch


def sample_rows(logits: torch.Tensor, u: torch.Tensor, temperature: float, top_k: int, top_p: float):
    """logits [n, V] float32, u [n] float32 (one uniform per row), one setting for every row → (tokens [n] long,
    sample_logprobs [n] float32)"""
    n, V = logits.shape
    if temperature <= 0:
        return torch.argmax(logits, dim=-1), torch.zeros(n, dtype=logits.dtype, device=logits.device)
    scaled = logits / torch.tensor(temperature, dtype=logits.dtype, device=logits.device)
    uu = u.to(logits.dtype)[:, None]
    k_off = top_k <= 0 or top_k >= V
    p_off = top_p <= 0 or top_p >= 1
    if k_off and p_off:
        cum = torch.cumsum(torch.softmax(scaled, dim=-1), dim=-1)
        tok = (cum <= uu * cum[:, -1:]).sum(dim=-1).clamp(max=V - 1)
        return tok, torch.log_softmax(scaled, dim=-1).gather(1, tok[:, None])[:, 0]
    k_eff = V if k_off else top_k
    p_eff = 2.0 if p_off else top_p
    sorted_vals, sorted_idx = torch.sort(scaled, dim=-1, descending=True, stable=True)
    qs = torch.softmax(sorted_vals, dim=-1)
    keep_k = torch.arange(V, device=logits.device)[None, :] < k_eff
    zero = torch.zeros((), dtype=qs.dtype, device=qs.device)
    cum_k = torch.cumsum(torch.where(keep_k, qs, zero), dim=-1)
    cum_excl = torch.cat([torch.zeros(n, 1, dtype=qs.dtype, device=qs.device), cum_k[:, :-1]], dim=-1)
    keep = keep_k & (cum_excl < torch.tensor(p_eff, dtype=qs.dtype, device=qs.device) * cum_k[:, -1:])
    cum_kept = torch.cumsum(torch.where(keep, qs, zero), dim=-1)
    below = (cum_kept <= uu * cum_kept[:, -1:]).sum(dim=-1)
    rank = torch.minimum(below, keep.sum(dim=-1) - 1)[:, None]
    kept_logq = torch.log_softmax(torch.where(keep, sorted_vals, torch.full_like(sorted_vals, float("-inf"))), dim=-1)
    return sorted_idx.gather(1, rank)[:, 0], kept_logq.gather(1, rank)[:, 0]
