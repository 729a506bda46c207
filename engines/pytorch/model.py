"""The transformer of engines/onnx/transformer/ (forward.ts, reference.ts) in PyTorch,
reading its weights straight out of the flat parameter vector θ (spec.py layout):

  h = tok_emb[tokens] (+ pos_emb[positions] when learned)
  per layer (pre-norm): h += Wo·attn(norm1(h)); h += mlp(norm2(h))
  logits = norm_f(h)·head (tied: tok_embᵀ), log-softmax

norm: LayerNorm (x − mean)·rsqrt(mean((x − mean)²) + eps)·g + b, or RMSNorm x·rsqrt(mean(x²) + eps)·g;
attention: softmax(q·kᵀ / √hd) over keys j ≤ i, query head h reads kv head ⌊h / (heads / kvHeads)⌋, hd = headDim
(width / heads unless set); with qkNorm each q and k head is RMS-normalized (gain lnq_g / lnk_g [hd]) before RoPE;
RoPE: rotate-half convention, angle(p, i) = p·θ^(−2(i mod hd/2)/hd) (tables in float64, then float32);
MLP: GPT-2's tanh GELU 0.5·z·(1 + tanh(√(2/π)(z + 0.044715 z³))), or SwiGLU silu(x·Wg)·(x·Wu).
"""
import math
import os

import numpy as np
import torch
import torch.utils.checkpoint

import philox
from spec import head_dim, param_layout

GELU_C = math.sqrt(2 / math.pi)
GELU_A = 0.044715
SIGMA = 0.02


# Dense float32 matmuls on CPU through oneDNN (mkldnn_linear): Debian's python3-torch links the
# generic reference BLAS, ~10x slower for these shapes. Used for inputs of ≥ MKLDNN_MIN_ROWS rows
# (prefill, Score, Update); single-row decode steps stay on aten's mm, which is faster there. The
# choice depends only on shapes, so results stay deterministic. TROUPE_TORCH_MKLDNN=0 turns it off.
MKLDNN = os.environ.get("TROUPE_TORCH_MKLDNN", "1") != "0" and torch.backends.mkldnn.is_available() and hasattr(torch._C._nn, "mkldnn_linear")
MKLDNN_MIN_ROWS = 4
# rows per chunk of a scoring forward (forward_rows): its shapes must not depend on the sequence length
ROW_CHUNK = 16
# sequences per step of forward_rows: each step runs SEQ_BLOCK chunks (the unused ones padded) through every dense op, so
# per-op overhead is shared by several sequences while every shape stays the same whatever the step holds
SEQ_BLOCK = 4
MEMO = "_onednn"  # the key of an inference weights dict's oneDNN copies


def _onednn(a, w_out_in):
    """a [N, in] @ w_out_inᵀ → [N, out] (both dense, contiguous, float32)"""
    return torch._C._nn.mkldnn_linear(a.to_mkldnn(), w_out_in.to_mkldnn(), None).to_dense()


class _OneDnnMatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):  # x [..., K] · w [K, M]
        ctx.save_for_backward(x, w)
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        return _onednn(x2, w.t().contiguous()).view(*x.shape[:-1], w.shape[1])

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1]).contiguous()
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = _onednn(g2, w.contiguous()).view(x.shape)  # g · wᵀ
        if ctx.needs_input_grad[1]:
            x2 = x.reshape(-1, x.shape[-1])
            gw = _onednn(x2.t().contiguous(), g2.t().contiguous())  # xᵀ · g
        return gx, gw


def matmul(x, w, memo=None, name=None):
    """x [..., K] · w [K, M]. `memo` (a dict, inference only) keeps w's oneDNN copy under `name` across calls:
    the same kernel on the same values as converting it each time, without the conversion."""
    if MKLDNN and x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() // x.shape[-1] >= MKLDNN_MIN_ROWS:
        if memo is None or torch.is_grad_enabled():
            return _OneDnnMatMul.apply(x, w)
        wm = memo.get(name)
        if wm is None:
            wm = memo[name] = w.t().contiguous().to_mkldnn()
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        return torch._C._nn.mkldnn_linear(x2.to_mkldnn(), wm, None).to_dense().view(*x.shape[:-1], w.shape[1])
    return x @ w


def init_weights(spec, seed: int) -> torch.Tensor:
    """θ₀ as init.ts draws it: Philox(seed, STREAM_INIT) uniforms, U(±σ√3) (residual-out /√(2·layers)), gains 1, biases 0.
    Bit-identical to the built-in engine's InitModel."""
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


class Transformer:
    def __init__(self, spec, device):
        self.spec = spec
        self.device = device
        self.slots, self.P = param_layout(spec)
        self.hd = head_dim(spec)
        self.group = spec["heads"] // spec["kvHeads"]
        if spec["positions"] == "rope":
            half = self.hd // 2
            p = np.arange(spec["maxSeq"], dtype=np.float64)[:, None]
            i = np.arange(self.hd) % half
            ang = p * np.power(float(spec["ropeTheta"]), (-2.0 * i) / self.hd)[None, :]
            self.cos = torch.tensor(np.cos(ang), dtype=torch.float32, device=device)
            self.sin = torch.tensor(np.sin(ang), dtype=torch.float32, device=device)

    def weights(self, theta: torch.Tensor, inference=False):
        """θ's slots as views by name; `inference` adds a memo of oneDNN weight copies (Generate, Score)."""
        W = {name: theta[off:off + int(np.prod(shape))].view(shape) for name, off, shape, _ in self.slots}
        if inference:
            W[MEMO] = {}
        return W

    # ---- building blocks ----
    def norm(self, W, x, name, kind=None):
        """The spec's norm over x's last axis; the q/k head norms pass kind "rmsnorm"."""
        eps = self.spec["normEps"]
        if (kind or self.spec["norm"]) == "layernorm":
            c = x - x.mean(dim=-1, keepdim=True)
            r = 1.0 / torch.sqrt((c * c).mean(dim=-1, keepdim=True) + eps)
            return c * r * W[f"{name}_g"] + W[f"{name}_b"]
        r = 1.0 / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps)
        return x * r * W[f"{name}_g"]

    def linear(self, W, x, layer, n):
        y = matmul(x, W[f"{layer}w{n}"], W.get(MEMO), f"{layer}w{n}")
        b = W.get(f"{layer}b{n}")
        return y + b if b is not None else y

    def rotate(self, x, pos):
        """x [B, n, S, hd], pos: LongTensor [S], or [B, S] (a position per row)"""
        cos, sin = self.cos[pos], self.sin[pos]
        if pos.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]
        half = self.hd // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def mlp(self, W, x, L):
        if self.spec["mlp"] == "gelu":
            z = self.linear(W, x, L, "1")
            a = 0.5 * z * (1 + torch.tanh(GELU_C * (z + GELU_A * (z * z * z))))
            return self.linear(W, a, L, "2")
        gate = self.linear(W, x, L, "g")
        up = self.linear(W, x, L, "u")
        return self.linear(W, gate * torch.sigmoid(gate) * up, L, "d")

    def heads(self, W, n1, L, pos):
        B, S, _ = n1.shape
        s = self.spec
        q = self.linear(W, n1, L, "q").view(B, S, s["heads"], self.hd).transpose(1, 2)
        k = self.linear(W, n1, L, "k").view(B, S, s["kvHeads"], self.hd).transpose(1, 2)
        v = self.linear(W, n1, L, "v").view(B, S, s["kvHeads"], self.hd).transpose(1, 2)
        if s["qkNorm"]:  # per head, before the rotation (Qwen3)
            q = self.norm(W, q, f"{L}lnq", "rmsnorm")
            k = self.norm(W, k, f"{L}lnk", "rmsnorm")
        if s["positions"] == "rope":
            q = self.rotate(q, pos)
            k = self.rotate(k, pos)
        return q, k, v

    def attend(self, q, k, v, mask):
        """q [B, H, S, hd], k/v [B, Hkv, T, hd], mask bool [S, T] or None → [B, S, H·hd]"""
        if self.group > 1:  # query head h reads kv head ⌊h / group⌋ (expand: its backward is a plain sum)
            B, Hkv, T, hd = k.shape
            k = k[:, :, None].expand(B, Hkv, self.group, T, hd).reshape(B, Hkv * self.group, T, hd)
            v = v[:, :, None].expand(B, Hkv, self.group, T, hd).reshape(B, Hkv * self.group, T, hd)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        ctx = p @ v
        B, H, S, hd = ctx.shape
        return ctx.transpose(1, 2).reshape(B, S, H * hd)

    def embed(self, W, tokens, pos):
        h = W["tok_emb"][tokens]
        if self.spec["positions"] == "learned":
            h = h + W["pos_emb"][pos]
        return h

    def head(self, W, h):
        nf = self.norm(W, h, "lnf")
        return matmul(nf, W["tok_emb"].t() if self.spec["tiedHead"] else W["head"], W.get(MEMO), "head")

    # ---- whole sequences ----
    def forward(self, W, tokens, cache=None):
        """tokens LongTensor [B, S] (right-padded) → logits [B, S, V]; position p predicts token p+1.
        With `cache` (a list), each layer's keys and values [B, Hkv, S, hd] are appended to it (a prefill)."""
        return self.head(W, self.trunk(W, tokens, cache))

    def trunk(self, W, tokens, cache=None, checkpoint_layers=False):
        """forward() up to the head: the last layer's output [B, S, D] (Update runs the head over chunks of rows).
        `checkpoint_layers` (Update with --activation-checkpointing): autograd keeps only each layer's input and
        reruns the layer in the backward, the same kernels on the same values, so the gradient's bits do not change."""
        S = tokens.shape[1]
        pos = torch.arange(S, device=tokens.device)
        mask = torch.ones(S, S, dtype=torch.bool, device=tokens.device).tril()
        h = self.embed(W, tokens, pos)
        for layer in range(self.spec["layers"]):
            L = f"l{layer}."

            def block(h, L=L):
                q, k, v = self.heads(W, self.norm(W, h, f"{L}ln1"), L, pos)
                if cache is not None:
                    cache.append([k, v])
                h = h + self.linear(W, self.attend(q, k, v, mask), L, "o")
                return h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
            if checkpoint_layers and cache is None:
                h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return h

    def forward_rows(self, W, jobs):
        """Forward passes of several sequences in chunks of exactly ROW_CHUNK rows (the last padded), each chunk attending
        to the keys of the chunks before it. Jobs run SEQ_BLOCK at a time: each step stacks one chunk per job into
        [SEQ_BLOCK, ROW_CHUNK] (slots without a chunk padded), so every dense op, norm and elementwise op has the same
        shape at every step, and each job's attention runs alone with shapes that depend only on its chunk index.
        Every op is row-local or a matmul of that fixed shape, so row p's logits are the same bits for every sequence
        that shares tokens 0..p, whatever runs beside it and however long it is: Score, Generate's prefill and its
        log-probs and an aborted Generate's shorter prefix agree bit for bit (a plain forward's matmul and softmax
        kernels change with the sequence length and batch, and its rows with them by an ulp or so).
        A job is a dict: "tokens" (list), "per_chunk(logits [ROW_CHUNK, V], c0)" called for each of its chunks (so
        vocabulary-sized values exist for one step at a time), optional "start" (first chunk to run) with "prefix"
        (each layer's [keys, values] [1, Hkv, ≥ start·ROW_CHUNK, hd] of the chunks before it, from an earlier pass over
        the same tokens: the same bits), optional "cache" (a list: each layer's keys and values [1, Hkv, S, hd] are
        appended to it, a prefill)."""
        s, C, G = self.spec, ROW_CHUNK, SEQ_BLOCK
        dev = self.device
        n_max = -(-s["maxSeq"] // C) * C
        # padded rows' positions are clamped into the tables; real rows never attend to them (causal)
        positions = torch.arange(n_max, device=dev).clamp(max=s["maxSeq"] - 1)
        causal = torch.ones(n_max, n_max, dtype=torch.bool, device=dev).tril()
        HD = s["heads"] * self.hd
        for b in range(0, len(jobs), G):
            group = []
            for j in jobs[b:b + G]:
                S = len(j["tokens"])
                padded = torch.zeros(-(-S // C) * C, dtype=torch.long, device=dev)
                padded[:S] = torch.tensor(j["tokens"], dtype=torch.long, device=dev)
                start = j.get("start", 0)
                keys = [[k[:, :, :start * C], v[:, :, :start * C]] for k, v in j["prefix"]] if start > 0 else [[None, None] for _ in range(s["layers"])]
                group.append((j, padded, start, keys))
            steps = max(len(padded) // C - start for _, padded, start, _ in group)
            for step in range(steps):
                tok = torch.zeros(G, C, dtype=torch.long, device=dev)
                pos = torch.zeros(G, C, dtype=torch.long, device=dev)
                live = []
                for g, (j, padded, start, keys) in enumerate(group):
                    c0 = (start + step) * C
                    if c0 < len(padded):
                        tok[g] = padded[c0:c0 + C]
                        pos[g] = positions[c0:c0 + C]
                        live.append((g, c0, keys))
                h = self.embed(W, tok, pos)
                for layer in range(s["layers"]):
                    L = f"l{layer}."
                    q, k, v = self.heads(W, self.norm(W, h, f"{L}ln1"), L, pos)
                    ctx = torch.zeros(G, C, HD, device=dev)
                    for g, c0, keys in live:
                        kk, vv = k[g:g + 1], v[g:g + 1]
                        if keys[layer][0] is not None:
                            kk = torch.cat([keys[layer][0], kk], dim=2)
                            vv = torch.cat([keys[layer][1], vv], dim=2)
                        keys[layer] = [kk, vv]
                        ctx[g] = self.attend(q[g:g + 1], kk, vv, causal[c0:c0 + C, :c0 + C])[0]
                    h = h + self.linear(W, ctx, L, "o")
                    h = h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
                logits = self.head(W, h)
                for g, c0, _ in live:
                    group[g][0]["per_chunk"](logits[g], c0)
            for j, _, _, keys in group:
                if j.get("cache") is not None:
                    S = len(j["tokens"])
                    j["cache"].extend([k[:, :, :S].contiguous(), v[:, :, :S].contiguous()] for k, v in keys)

    # ---- batched decoding: fixed shapes, so a row's bits do not depend on the batch ----
    def new_cache(self, rows):
        """Keys and values of `rows` decode slots, each holding up to maxSeq positions: [[k, v] per layer]."""
        shape = (rows, self.spec["kvHeads"], self.spec["maxSeq"], self.hd)
        return [[torch.zeros(shape, device=self.device), torch.zeros(shape, device=self.device)] for _ in range(self.spec["layers"])]

    def decode_batch(self, W, tokens, positions, cache):
        """One token per slot: tokens, positions LongTensor [R] (every slot, used or not), cache from new_cache
        (slot r's keys 0..positions[r]-1 filled) → logits [R, V]; writes each slot's key and value at its position.
        Every tensor has the same shape whatever the slots hold (R rows, maxSeq keys masked per row), and every op
        is row-local or a matmul of that fixed shape, so slot r's logits depend only on its own tokens."""
        R = tokens.shape[0]
        rows = torch.arange(R, device=self.device)
        Hkv, g, hd = self.spec["kvHeads"], self.group, self.hd
        h = self.embed(W, tokens[:, None], positions[:, None])  # [R, 1, D]
        keys = torch.arange(self.spec["maxSeq"], device=self.device)
        mask = (keys[None, :] <= positions[:, None])[:, None, None, :]  # [R, 1, 1, maxSeq]: slot r's keys 0..positions[r]
        for layer in range(self.spec["layers"]):
            L = f"l{layer}."
            q, k, v = self.heads(W, self.norm(W, h, f"{L}ln1"), L, positions[:, None])
            ck, cv = cache[layer]
            ck[rows, :, positions] = k[:, :, 0]
            cv[rows, :, positions] = v[:, :, 0]
            # one query per slot: element-wise products and sums over fixed dims (R·H tiny matmuls are slow on CPU)
            qg = q.view(R, Hkv, g, 1, hd)
            scores = (qg * ck[:, :, None]).sum(-1) * (1.0 / math.sqrt(hd))  # [R, Hkv, g, maxSeq]
            p = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
            ctx = (p[..., None] * cv[:, :, None]).sum(-2).reshape(R, 1, Hkv * g * hd)
            h = h + self.linear(W, ctx, L, "o")
            h = h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
        return self.head(W, h)[:, 0]

    # ---- incremental decoding with a KV cache (batch of one sequence) ----
    def decode(self, W, token: int, position: int, cache):
        """One new token at `position` attending to the cache (extended in place) → logits [V]."""
        tokens = torch.tensor([[token]], dtype=torch.long, device=self.device)
        pos = torch.tensor([position], dtype=torch.long, device=self.device)
        h = self.embed(W, tokens, pos)
        for layer in range(self.spec["layers"]):
            L = f"l{layer}."
            q, k, v = self.heads(W, self.norm(W, h, f"{L}ln1"), L, pos)
            k = torch.cat([cache[layer][0], k], dim=2)
            v = torch.cat([cache[layer][1], v], dim=2)
            cache[layer] = [k, v]
            h = h + self.linear(W, self.attend(q, k, v, None), L, "o")
            h = h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
        return self.head(W, h)[0, 0]
