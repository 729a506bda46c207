"""PyTorch-on-CPU column of bench/transformer.ts: the same GPT-2 layout shapes
(learned positions, LayerNorm, tanh GELU, biases, tied head), thread count and
workloads as the ONNX runtime, measured the same way (median of reps after a
warm-up; wall and process CPU time). Started by bench/transformer.ts, which
passes the configs as JSON; prints one JSON object per measurement on stdout.

Generation uses a KV cache preallocated to the run's length and attends over
the written columns only (what an eager PyTorch decoder does); sampling is
torch.multinomial at temperature 1. Update: forward, PPO clipped loss,
backward, global-norm clip, AdamW, one step.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


class Gpt(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        D, L, V, S, Fw = c["width"], c["layers"], c["vocabSize"], c["maxSeq"], c["mlpWidth"]
        self.h, self.hd = c["heads"], D // c["heads"]
        self.tok = torch.nn.Embedding(V, D)
        self.pos = torch.nn.Embedding(S, D)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(
                {
                    "ln1": torch.nn.LayerNorm(D),
                    "qkv": torch.nn.Linear(D, 3 * D),
                    "o": torch.nn.Linear(D, D),
                    "ln2": torch.nn.LayerNorm(D),
                    "up": torch.nn.Linear(D, Fw),
                    "down": torch.nn.Linear(Fw, D),
                }
            )
            for _ in range(L)
        )
        self.lnf = torch.nn.LayerNorm(D)

    def heads(self, x):  # [B, S, D] -> [B, H, S, hd]
        B, S, _ = x.shape
        return x.view(B, S, self.h, self.hd).transpose(1, 2)

    def forward(self, tokens, start=0, caches=None):
        """tokens [B, S] at positions start..start+S-1; caches: per layer (k, v) [B, H, maxLen, hd] written in place."""
        B, S = tokens.shape
        x = self.tok(tokens) + self.pos(torch.arange(start, start + S))
        causal = torch.ones(S, start + S, dtype=torch.bool).tril(start)
        for i, b in enumerate(self.blocks):
            q, k, v = b["qkv"](b["ln1"](x)).split(x.shape[-1], dim=-1)
            q, k, v = self.heads(q), self.heads(k), self.heads(v)
            if caches is not None:
                kc, vc = caches[i]
                kc[:, :, start : start + S] = k
                vc[:, :, start : start + S] = v
                k, v = kc[:, :, : start + S], vc[:, :, : start + S]
            att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            x = x + b["o"]((att @ v).transpose(1, 2).reshape(B, S, -1))
            x = x + b["down"](F.gelu(b["up"](b["ln2"](x)), approximate="tanh"))
        return self.lnf(x) @ self.tok.weight.t()

    @torch.no_grad()
    def generate(self, context, steps):
        B, C = context.shape
        caches = [
            (torch.zeros(B, self.h, C + steps, self.hd), torch.zeros(B, self.h, C + steps, self.hd)) for _ in self.blocks
        ]
        logits = self.forward(context, 0, caches)[:, -1]
        out = []
        for t in range(steps):
            tok = torch.multinomial(logits.softmax(-1), 1)
            out.append(tok)
            if t + 1 < steps:
                logits = self.forward(tok, C + t, caches)[:, -1]
        return torch.cat(out, 1)


def timed(reps, fn):
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return {"wall": statistics.median(wall), "cpu": statistics.median(cpu)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--configs", required=True, help="JSON {name: normalized transformer spec}")
    ap.add_argument("--workloads", required=True, help="JSON of bench/transformer.ts's workloads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    w = json.loads(a.workloads)

    def emit(**kv):
        print(json.dumps(kv), flush=True)

    for name, c in json.loads(a.configs).items():
        model = Gpt(c)
        V = c["vocabSize"]

        def ctx(B, C):
            return torch.tensor([[(i * 31 + j * 7) % V for j in range(C)] for i in range(B)])

        for B in w["generateBatches"]:
            t = timed(a.reps, lambda: model.generate(ctx(B, w["generateContext"]), w["generateTokens"]))
            emit(config=name, metric="generate", batch=B, **t)
        for C in w["decodePositions"]:
            one = timed(a.reps, lambda: model.generate(ctx(w["decodeBatch"], C), 1))
            many = timed(a.reps, lambda: model.generate(ctx(w["decodeBatch"], C), w["decodeTokens"] + 1))
            emit(config=name, metric="decode", position=C, **{k: (many[k] - one[k]) / w["decodeTokens"] for k in one})
        n, ctxLen, gen = w["updateSequences"], w["updateContext"], w["updateTokens"]
        seq = torch.tensor([[(i + j) % V for j in range(ctxLen)] + [(i * 5 + j) % V for j in range(gen)] for i in range(n)])
        adv = torch.tensor([[((i + j) % 3) - 1.0 for j in range(gen)] for i in range(n)])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

        def step():
            logp = model(seq[:, :-1]).log_softmax(-1)[:, ctxLen - 1 :].gather(-1, seq[:, ctxLen:, None])[..., 0]
            ratio = (logp - (-math.log(V))).exp()
            loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.28) * adv).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        emit(config=name, metric="update", **timed(a.reps, step))


if __name__ == "__main__":
    main()
