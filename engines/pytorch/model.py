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
# (every Score and Generate step, Update); smaller ones stay on aten's mm, which is faster there. The
# choice depends only on shapes, so results stay deterministic. TROUPE_TORCH_MKLDNN=0 turns it off.
MKLDNN = os.environ.get("TROUPE_TORCH_MKLDNN", "1") != "0" and torch.backends.mkldnn.is_available() and hasattr(torch._C._nn, "mkldnn_linear")
MKLDNN_MIN_ROWS = 4
# rows of a Score, prefill or decode step (Transformer.run_rows): each dense op, norm and elementwise op runs on BLOCK
# rows, or on another of STEP_SIZES where every row gets the same bits as in a BLOCK-row step (Transformer.step_sizes),
# so a row's bits do not depend on what runs beside it. Larger steps share each op's dispatch among more rows (a
# prefill), smaller ones waste fewer padding rows (a decode of a few sequences). oneDNN's AVX2 sgemm computes rows in
# blocks of 6 and a tail of 1–3 rows by another kernel (other bits), so each size is ≡ 0 or 4 (mod 6); and a multiple
# of 16, so that an element-wise op over size × width values has no scalar tail (its vector and scalar
# transcendentals may differ in the last bit).
BLOCK = 64
STEP_SIZES = (16, 48, 64, 96, 112, 144, 160, 192, 208, 240, 256)
PROBE_COLUMNS = 2048  # at most this many output columns of a dense shape are probed (the vocabulary can be large)
# rows per attention group of a step: groups of padding rows are skipped, and a group's keys, values and products
# [ATT_ROWS, heads, maxSeq, headDim] bound the step's memory
ATT_ROWS = 16
# key lengths an attention group may stop at (multiples of 16, then growing by half; maxSeq itself always): a group attends
# to the first L keys of its slots, the smallest of Transformer.key_lengths that covers its rows' positions
KEY_LENGTHS = tuple(range(16, 257, 16)) + (384, 576, 864, 1296, 1952, 2928, 4400, 6592, 9888, 14832, 22256, 33376)
MEMO = "_onednn"  # the key of an inference weights dict's oneDNN copies
LORA = "_lora"  # the key of a LoRA run's adapters in its inference weights dict (lora.Adapters; per step lora.RowAdapters)


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


def _grouped_mm(a, b):
    """a [G, n, k] · b [G, k, m] → [G, n, m] (dense float32 on CPU) on oneDNN: one grouped 1×1 convolution, group g
    taking b[g]ᵀ as its weights over a[g]'s n positions. The generic reference BLAS's bmm is ~3x slower here."""
    G, n, k = a.shape
    m = b.shape[2]
    x = a.transpose(1, 2).reshape(1, G * k, n, 1)
    w = b.transpose(1, 2).reshape(G * m, k, 1, 1)
    return torch.mkldnn_convolution(x, w, None, [0, 0], [1, 1], [1, 1], G).reshape(G, m, n).transpose(1, 2)


class _OneDnnBatchMatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):  # a [G, n, k] · b [G, k, m]
        ctx.save_for_backward(a, b)
        return _grouped_mm(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = _grouped_mm(g, b.transpose(1, 2))  # g · bᵀ
        if ctx.needs_input_grad[1]:
            gb = _grouped_mm(a.transpose(1, 2), g)  # aᵀ · g
        return ga, gb


def batch_matmul(a, b):
    """a [..., n, k] · b [..., k, m] over the same leading dims (Update's attention): on oneDNN (_grouped_mm) where
    matmul() uses it, else aten's. Its kernels depend only on the shapes, so the bits are reproducible."""
    if not (MKLDNN and a.device.type == "cpu" and a.dtype == torch.float32 and hasattr(torch, "mkldnn_convolution")):
        return a @ b
    lead = a.shape[:-2]
    y = _OneDnnBatchMatMul.apply(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return y.reshape(*lead, *y.shape[-2:])


def _onednn_rows(x):
    return MKLDNN and x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() // x.shape[-1] >= MKLDNN_MIN_ROWS


def matmul(x, w, memo=None, name=None):
    """x [..., K] · w [K, M]. `memo` (a dict, inference only) keeps w's oneDNN copy under `name` across calls:
    the same kernel on the same values as converting it each time, without the conversion."""
    if _onednn_rows(x):
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
        self.sizes = [int(np.prod(shape)) for _, _, shape, _ in self.slots]  # the slots tile θ in order (spec.param_layout)
        self.hd = head_dim(spec)
        self.group = spec["heads"] // spec["kvHeads"]
        self._sizes = None
        self._keys = None
        if spec["positions"] == "rope":
            half = self.hd // 2
            p = np.arange(spec["maxSeq"], dtype=np.float64)[:, None]
            i = np.arange(self.hd) % half
            ang = p * np.power(float(spec["ropeTheta"]), (-2.0 * i) / self.hd)[None, :]
            self.cos = torch.tensor(np.cos(ang), dtype=torch.float32, device=device)
            self.sin = torch.tensor(np.sin(ang), dtype=torch.float32, device=device)

    def weights(self, theta: torch.Tensor, inference=False):
        """θ's slots as views by name; `inference` adds a memo of oneDNN weight copies (Generate, Score).
        The slots tile θ in order, so they are cut by one split: in an Update its backward writes every slot's gradient
        into one θ-sized tensor (a concatenation), where a slice per slot would make a zero-filled θ-sized tensor per
        slot and add them all up (two θ-sized passes per slot: most of a ~10M model's Update). Each value of the
        gradient is its slot's, as before."""
        W = {name: piece.view(shape) for (name, _, shape, _), piece in zip(self.slots, theta.split(self.sizes))}
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

    def linear(self, W, x, layer, *names):
        """x·w_n (+ b_n) for each of `names`: a tensor for one name, a tuple for several. At inference (W holds the
        oneDNN memo) on oneDNN's path they run as one matmul of the weights side by side with the biases added in it,
        saving a dispatch and conversion per name (each output column is still its own dot product). In a LoRA run's step
        (W[LORA]) each targeted name's output then gets its rows' adapter terms (lora.RowAdapters.delta)."""
        memo = W.get(MEMO)
        if memo is None or torch.is_grad_enabled() or not _onednn_rows(x):
            ys = []
            for n in names:
                y = matmul(x, W[f"{layer}w{n}"], memo, f"{layer}w{n}")
                b = W.get(f"{layer}b{n}")
                ys.append(y + b if b is not None else y)
        else:
            key = layer + "w" + "".join(names)
            wb = memo.get(key)
            if wb is None:
                biases = [W.get(f"{layer}b{n}") for n in names]  # the spec's `bias`: every linear map has one, or none does
                wb = memo[key] = (torch.cat([W[f"{layer}w{n}"] for n in names], dim=1).t().contiguous().to_mkldnn(),
                                  None if biases[0] is None else torch.cat(biases).to_mkldnn())
            x2 = x.reshape(-1, x.shape[-1]).contiguous()
            y = torch._C._nn.mkldnn_linear(x2.to_mkldnn(), wb[0], wb[1]).to_dense().view(*x.shape[:-1], -1)
            ys = [y] if len(names) == 1 else y.split([W[f"{layer}w{n}"].shape[1] for n in names], dim=-1)
        lora = W.get(LORA)
        if lora is not None:  # a LoRA run's step (lora.RowAdapters): + each row's own unmerged adapter term, PEFT's order
            ys = [y if d is None else y + d for y, d in ((y, lora.delta(x, f"{layer}w{n}")) for y, n in zip(ys, names))]
        return ys[0] if len(names) == 1 else tuple(ys)

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
        gate, up = self.linear(W, x, L, "g", "u")
        return self.linear(W, gate * torch.sigmoid(gate) * up, L, "d")

    def heads(self, W, n1, L, pos):
        B, S, _ = n1.shape
        s = self.spec
        q, k, v = self.linear(W, n1, L, "q", "k", "v")
        q = q.reshape(B, S, s["heads"], self.hd).transpose(1, 2)
        k = k.reshape(B, S, s["kvHeads"], self.hd).transpose(1, 2)
        v = v.reshape(B, S, s["kvHeads"], self.hd).transpose(1, 2)
        if s["qkNorm"]:  # per head, before the rotation (Qwen3)
            q = self.norm(W, q, f"{L}lnq", "rmsnorm")
            k = self.norm(W, k, f"{L}lnk", "rmsnorm")
        if s["positions"] == "rope":
            q = self.rotate(q, pos)
            k = self.rotate(k, pos)
        return q, k, v

    def attend(self, q, k, v, mask):
        """q [B, H, S, hd], k/v [B, Hkv, T, hd], mask bool [S, T] → [B, S, H·hd]"""
        if self.group > 1:  # query head h reads kv head ⌊h / group⌋ (expand: its backward is a plain sum)
            B, Hkv, T, hd = k.shape
            k = k[:, :, None].expand(B, Hkv, self.group, T, hd).reshape(B, Hkv * self.group, T, hd)
            v = v[:, :, None].expand(B, Hkv, self.group, T, hd).reshape(B, Hkv * self.group, T, hd)
        scores = batch_matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        p = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        ctx = batch_matmul(p, v)
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

    # ---- whole sequences (Update) ----
    def trunk(self, W, tokens, checkpoint_layers=False):
        """tokens LongTensor [B, S] (right-padded) → the last layer's output [B, S, D]; head() of row p predicts token
        p+1 (Update runs the head over chunks of rows).
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
                h = h + self.linear(W, self.attend(q, k, v, mask), L, "o")
                return h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
            if checkpoint_layers:
                h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return h

    # ---- rows against a KV cache: Score, Generate's prefill and its decode are the same steps ----
    def new_cache(self, slots):
        """Keys and values of `slots` sequences, each up to maxSeq positions: [[k, v] per layer], each
        [slots, kvHeads, maxSeq, headDim]."""
        shape = (slots, self.spec["kvHeads"], self.spec["maxSeq"], self.hd)
        return [[torch.zeros(shape, device=self.device), torch.zeros(shape, device=self.device)] for _ in range(self.spec["layers"])]

    def step_sizes(self):
        """The STEP_SIZES whose rows get the same bits as in BLOCK-row matmuls, for each of the spec's dense shapes, on
        this machine (oneDNN picks its kernels by shape and instruction set, not by values): probed once on random
        values, every row of each size against a BLOCK-row matmul holding it. Only BLOCK off oneDNN's path (CUDA, or
        oneDNN off)."""
        if self._sizes is None:
            self._sizes = [BLOCK]
            if _onednn_rows(torch.zeros(BLOCK, 1, device=self.device)):
                s, gen = self.spec, torch.Generator().manual_seed(0)
                D, F = s["width"], s["mlpWidth"] * (1 if s["mlp"] == "gelu" else 2)
                dq, dkv = s["heads"] * self.hd, s["kvHeads"] * self.hd
                b = s["bias"]
                shapes = [(D, dq + 2 * dkv, b), (dq, D, b), (D, F, b), (s["mlpWidth"], D, b), (D, s["vocabSize"], False)]
                ok = set(STEP_SIZES)
                for K, N, bias in shapes:
                    N = min(N, PROBE_COLUMNS)
                    w = torch.rand(N, K, generator=gen).to_mkldnn()
                    b = torch.rand(N, generator=gen).to_mkldnn() if bias else None
                    x = torch.rand(max(STEP_SIZES), K, generator=gen) - 0.5

                    def rows(x):
                        return torch._C._nn.mkldnn_linear(x.contiguous().to_mkldnn(), w, b).to_dense()
                    for n in list(ok):
                        y = rows(x[:n])
                        if n < BLOCK:
                            same = torch.equal(y, rows(x[:BLOCK])[:n])
                        else:
                            same = all(torch.equal(y[a:a + BLOCK], rows(x[a:a + BLOCK])) for a in [*range(0, n - BLOCK, BLOCK), n - BLOCK])
                        if not same:
                            ok.discard(n)
                self._sizes = sorted(ok | {BLOCK})
        return self._sizes

    def key_lengths(self):
        """The KEY_LENGTHS below maxSeq, and maxSeq, at which a group's attention gives the same bits as over all maxSeq
        keys: the keys past a row's position are masked, so they add exact zeros, after the others, to the softmax's
        sum and to the values' sum, when those kernels only append them to their running sums (aten's CPU kernels do;
        not assumed: probed once per spec on random values, each length against the next, the last against maxSeq,
        with the spec's heads). maxSeq only on CUDA."""
        if self._keys is None:
            M = self.spec["maxSeq"]
            self._keys = [M]
            if self.device == "cpu" or str(self.device) == "cpu":
                s, gen = self.spec, torch.Generator().manual_seed(1)
                Hkv, g, hd, A = s["kvHeads"], self.group, self.hd, ATT_ROWS
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
                    self._keys.insert(0, L)
                    longer = L
        return self._keys

    def run_rows(self, W, cache, rows, on_block, max_step=BLOCK):
        """Rows [(token, position, cache slot)] in steps of the largest of step_sizes() up to max_step (the last: the
        smallest that holds what is left), in order → on_block(logits [step rows, V], first row, real rows) per step.
        Each row writes its key and value at (slot, position), then attends to its slot's keys 0..position, so a
        sequence's rows may be split over steps and share one with other sequences' rows; a slot must hold the
        sequence's keys of earlier positions (an earlier step, or earlier in this one).
        Every op is row-local or has the same shape at every step: a row's attention runs over all maxSeq keys of its slot
        (the later ones masked) in a group of ATT_ROWS rows, its dense ops in a matmul whose row count gives every row the
        same bits (step_sizes). So a row's logits depend only on its own sequence's tokens 0..position: Score, a prefill
        and a decode step give the same bits for the same position, whatever else runs and however the rows are split
        (Generate's log-probs are Score's). In a LoRA run each row adds its own adapter's terms by per-row matmuls of
        one shape (lora.py), so this holds whichever adapters share a step."""
        pad = (0, 0, 0)  # padding rows read slot 0 and write nothing
        sizes = [n for n in self.step_sizes() if n <= max_step] or self.step_sizes()[:1]
        for a in range(0, len(rows), sizes[-1]):
            block = rows[a:a + sizes[-1]]
            m = len(block)
            block = block + [pad] * (next(n for n in sizes if n >= m) - m)
            on_block(self.step(W, cache, block, m), a, m)

    def step(self, W, cache, block, m):
        """One step of run_rows: rows (token, position, slot), the first m real → logits [rows, V]."""
        s = self.spec
        n = len(block)
        Hkv, g, hd, A = s["kvHeads"], self.group, self.hd, ATT_ROWS
        if W.get(LORA) is not None:  # a LoRA run: each row's adapter is its slot's (lora.Adapters.rows)
            W = {**W, LORA: W[LORA].rows(block)}
        tok, pos, slot = torch.tensor(block, dtype=torch.long).t().to(self.device)
        h = self.embed(W, tok[:, None], pos[:, None])  # [n, 1, D]
        keys = torch.arange(s["maxSeq"], device=self.device)
        hidden = (keys[None, :] > pos[:, None])[:, None, None, :]  # [n, 1, 1, maxSeq]: row r sees keys 0..pos[r]
        # the slots each group of real rows reads (padding rows read anything): one slot (a prefill) or a run of them
        # (decode rows) is read in place, others gathered; and the keys it reads: the first L, L covering its positions
        groups = []
        lengths = self.key_lengths()
        for a in range(0, m, A):
            sl = [r[2] for r in block[a:min(a + A, m)]]
            nk = next(n for n in lengths if n > max(r[1] for r in block[a:min(a + A, m)]))
            if sl.count(sl[0]) == len(sl):
                groups.append((a, slice(sl[0], sl[0] + 1), nk))
            elif sl == list(range(sl[0], sl[0] + len(sl))) and sl[0] + A <= cache[0][0].shape[0]:
                groups.append((a, slice(sl[0], sl[0] + A), nk))
            else:
                groups.append((a, slot[a:a + A], nk))
        for layer in range(s["layers"]):
            L = f"l{layer}."
            q, k, v = self.heads(W, self.norm(W, h, f"{L}ln1"), L, pos[:, None])
            ck, cv = cache[layer]
            ck[slot[:m], :, pos[:m]] = k[:m, :, 0]
            cv[slot[:m], :, pos[:m]] = v[:m, :, 0]
            ctx = []
            for a, at, nk in groups:
                # one query per row: element-wise products and sums over fixed dims (row·head tiny matmuls are slow on CPU);
                # a slot read in place broadcasts over the group's rows: the same products, so the same bits
                K, V = ck[at][:, :, :nk], cv[at][:, :, :nk]  # [A or 1, Hkv, nk, hd]
                qg = q[a:a + A].reshape(A, Hkv, g, 1, hd)
                scores = (qg * K[:, :, None]).sum(-1) * (1.0 / math.sqrt(hd))  # [A, Hkv, g, nk]
                p = torch.softmax(scores.masked_fill(hidden[a:a + A, :, :, :nk], float("-inf")), dim=-1)
                ctx.append((p[..., None] * V[:, :, None]).sum(-2).reshape(A, 1, Hkv * g * hd))
            if len(ctx) * A < n:
                ctx.append(torch.zeros(n - len(ctx) * A, 1, Hkv * g * hd, device=self.device))
            h = h + self.linear(W, torch.cat(ctx), L, "o")
            h = h + self.mlp(W, self.norm(W, h, f"{L}ln2"), L)
        return self.head(W, h)[:, 0]
