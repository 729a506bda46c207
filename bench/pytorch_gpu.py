#!/usr/bin/python3
"""The GPU check of the PyTorch engine: its device code at real shapes, without gRPC or Node, one command; prints a
markdown table (beside the earlier engine's H200 numbers) and writes JSON after every measurement.

    python3 bench/pytorch_gpu.py --out $OUT/gpu-check.json                      # the GPU check (defaults below)
    python3 bench/pytorch_gpu.py --tiny --out /tmp/gpu-check.json                # the tiny shapes, on CPU (CI runs this)

Models (random init, no download): Qwen3-0.6B (width 1024, 28 layers, 16 heads, 8 KV heads, head dim 128, MLP 3072,
q/k norms, tied head, vocab 151936) and Qwen3-1.7B (2048, 28, 16, 8, 128, MLP 6144), RoPE theta 1e6, RMSNorm eps
1e-6; also Qwen2.5-0.5B / 1.5B shapes (--models 0.5b,1.5b) for the earlier table. The model code is the engine's
(hf.py: transformers' Qwen3 / Llama modules, θ in the family's flat layout, the engine's row steps). θ is drawn on the
device with torch's generator (uniform ±0.02·√3), not Philox: InitModel's distribution, not its bytes.

Per model and dtype (fp32; bf16 = the engine's `--dtype bf16`: its device queue runs every job under
torch.autocast(cuda, bfloat16), θ and AdamW state float32), every job submitted through the engine's own DeviceQueue:
  generate  Engine._generate_batch (what Generate runs: fixed-shape steps of model.BLOCK rows over max_batch cache slots,
            prefill and decode rows alike, then sampling) at batch 1/16/64/256, prompt 256, 256 new tokens, temperature 1;
            tokens/s = new tokens / wall, with the time split into steps / sampling / rest
  update    update.run_update (what Update runs after its scoring pass) on 64 sequences of 1024 tokens (256 context,
            768 trained), one AdamW step, the engine's default --micro-batch-bytes; `update-lora` the same for a
            rank-16 adapter on every projection (lora.py)
  score     Engine._score_many over the same 64 sequences (Score, and Update's log-prob gap pass); under bf16 its
            log-probs are compared with fp32's: max and mean |Δ logprob| over the trained tokens
Peak GPU memory is torch.cuda.max_memory_allocated, reset before each measurement (on CPU: the process's peak RSS
so far). Each measurement is timed between torch.cuda.synchronize() calls, after one warm-up per model and dtype;
an OOM or error is recorded and the run goes on; past --budget-s the rest is recorded as skipped. The JSON file is
rewritten after every measurement, so a run cut short still leaves its results.
"""
import argparse
import json
import math
import os
import resource
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE_DIR = os.path.normpath(os.path.join(HERE, "..", "engines", "pytorch"))
sys.path.insert(0, ENGINE_DIR)


def _stubs():
    """The engine's modules import the generated gRPC stubs (engines/pytorch/.gen, made by the server at start-up from protoc)
    and grpc. Where they are absent, small stand-ins: Generate's results are plain records here (no gRPC is used)."""
    sys.path.insert(0, os.path.join(ENGINE_DIR, ".gen"))
    try:
        import engine_pb2  # noqa: F401
        import engine_pb2_grpc  # noqa: F401
        import grpc  # noqa: F401
        return "generated stubs"
    except Exception:  # noqa: BLE001
        pass
    pb = types.ModuleType("engine_pb2")

    class GeneratedSequence:
        def __init__(self, tokens=(), logprobs=(), sample_logprobs=(), stop_reason=0):
            self.tokens, self.logprobs, self.sample_logprobs, self.stop_reason = list(tokens), list(logprobs), list(sample_logprobs), stop_reason
    pb.GeneratedSequence = GeneratedSequence
    pb.STOP_TOKEN, pb.MAX_TOKENS, pb.ABORTED = 1, 2, 3
    pbg = types.ModuleType("engine_pb2_grpc")
    pbg.EngineServicer = object
    sys.modules["engine_pb2"], sys.modules["engine_pb2_grpc"] = pb, pbg
    try:
        import grpc  # noqa: F401,F811
    except ImportError:
        g = types.ModuleType("grpc")
        g.StatusCode = types.SimpleNamespace(**{k: k for k in ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "ABORTED", "INTERNAL")})
        sys.modules["grpc"] = g
    return "stand-in stubs (no generated gRPC stubs here)"


STUBS = _stubs()
import numpy as np  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts, as server.py sets it
import generation  # noqa: E402
import memory  # noqa: E402
from boot import DTYPES  # noqa: E402
from engine import Engine  # noqa: E402
from generation import GenerateCall  # noqa: E402
from messages import settings_of  # noqa: E402
import hf  # noqa: E402
import spec as specmod  # noqa: E402
from lora import LoraModel, init_adapter  # noqa: E402
from init import SIGMA, init_weights  # noqa: E402
from update import micro_batch_plan, run_update  # noqa: E402

# The earlier engine on an NVIDIA H200 (bench/results/pytorch-gpu-h200.md, 2026-11-26, its hand-written model, 0.5b fp32,
# prompt 64, 128 new tokens, update 64 x 512): printed beside this run's table.
EARLIER = {"generate batch 64": "161 new tokens/s", "generate batch 1": "13.4 new tokens/s", "update": "439 trained tokens/s (64 x 512)"}

QWEN2 = {"positions": "rope", "ropeTheta": 1_000_000, "norm": "rmsnorm", "normEps": 1e-6, "mlp": "swiglu", "bias": True, "tiedHead": True}
SHAPES = {
    "0.5b": {"vocabSize": 151936, "width": 896, "layers": 24, "heads": 14, "kvHeads": 2, "mlpWidth": 4864},
    "1.5b": {"vocabSize": 151936, "width": 1536, "layers": 28, "heads": 12, "kvHeads": 2, "mlpWidth": 8960},
    "qwen3-0.6b": {"vocabSize": 151936, "width": 1024, "layers": 28, "heads": 16, "kvHeads": 8, "headDim": 128, "mlpWidth": 3072,
                   "qkNorm": True, "bias": False},
    "qwen3-1.7b": {"vocabSize": 151936, "width": 2048, "layers": 28, "heads": 16, "kvHeads": 8, "headDim": 128, "mlpWidth": 6144,
                   "qkNorm": True, "bias": False},
    "tiny": {"vocabSize": 512, "width": 64, "layers": 2, "heads": 4, "kvHeads": 2, "mlpWidth": 128},
    "qwen3-tiny": {"vocabSize": 512, "width": 64, "layers": 2, "heads": 4, "kvHeads": 2, "headDim": 32, "mlpWidth": 128, "qkNorm": True, "bias": False},
}


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="JSON results file")
    p.add_argument("--models", default="qwen3-0.6b,qwen3-1.7b", help=f"comma list of {', '.join(SHAPES)}")
    p.add_argument("--tiny", action="store_true", help="the tiny shapes only (CPU check of this script)")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--device", default="auto", help="auto (cuda:0 when available), cpu, cuda:N")
    p.add_argument("--batches", default="64,256,16,1")
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--update-seqs", type=int, default=64)
    p.add_argument("--update-len", type=int, default=1024, help="tokens per update sequence (context = --prompt)")
    p.add_argument("--max-seq", type=int, default=1024, help="the spec's maxSeq (every row attends over all of it)")
    p.add_argument("--max-batch", type=int, default=256, help="the engine's --max-batch (cache slots)")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the engine's --threads default)")
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--skip", default="score", help="comma list of measurements to leave out: generate, update, update-lora, score")
    p.add_argument("--cpu-bf16", action="store_true",
                   help="on CPU, run bf16 under torch.autocast(cpu) (not an engine path: the engine refuses bf16 on CPU); to test this script")
    a = p.parse_args()
    if a.tiny:  # a prompt longer than a CPU step's 256 rows: Generate's first steps draw no token (as on CUDA's 64)
        a.models, a.batches, a.prompt, a.new_tokens, a.update_seqs, a.update_len, a.max_seq, a.max_batch = \
            "qwen3-tiny", "4,1", 264, 8, 4, 280, 288, 8
    a.models = a.models.split(",")
    for m in a.models:
        if m not in SHAPES:
            p.error(f"--models: unknown model {m!r}; known: {', '.join(SHAPES)}")
    a.dtypes = a.dtypes.split(",")
    for d in a.dtypes:
        if d not in DTYPES:
            p.error(f"--dtypes: unknown dtype {d!r}; known: {', '.join(DTYPES)}")
    a.batches = [int(b) for b in str(a.batches).split(",")]
    if a.update_len <= a.prompt:
        p.error("--update-len must exceed --prompt (the trained tokens follow the context)")
    a.skip = set(x for x in a.skip.split(",") if x)
    return a


def make_spec(name, max_seq):
    """(spec, note): the engine's normalized spec, or the raw layout with the reason normalize refused it."""
    cfg = {**QWEN2, **SHAPES[name], "maxSeq": max_seq}
    V = cfg.pop("vocabSize")
    try:
        return specmod.normalize("transformer", V, cfg), ""
    except specmod.SpecError as e:
        s = {"family": "transformer", "vocabSize": V}
        cfg = {"headDim": cfg["width"] // cfg["heads"], "qkNorm": False, **cfg}
        s.update({k: (float(cfg[k]) if k in ("ropeTheta", "normEps") else cfg[k]) for k in specmod.FIELDS})
        return s, f"spec.normalize refuses this spec ({e}); measured with the raw layout"


def init_theta(spec, device, seed=1):
    """θ₀ by init.ts's rule; Philox (the engine's InitModel bytes) below 20M parameters, else torch's generator."""
    slots, P = specmod.param_layout(spec)
    if P < 20_000_000:
        return init_weights(spec, seed).to(device)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    theta = torch.empty(P, dtype=torch.float32, device=device)
    half = SIGMA * math.sqrt(3)
    for _, off, shape, kind in slots:
        seg = theta[off:off + int(np.prod(shape))]
        if kind == "gain":
            seg.fill_(1)
        elif kind == "bias":
            seg.zero_()
        else:
            a = half / math.sqrt(2 * spec["layers"]) if kind == "residual-out" else half
            seg.uniform_(-a, a, generator=g)
    return theta


class Bench:
    def __init__(self, a):
        self.a = a
        self.t0 = time.monotonic()
        self.rows = []
        self.meta = {}
        dev = a.device
        if dev == "auto":
            dev = "cuda:0" if torch.cuda.is_available() else "cpu"
        self.device = dev
        self.cuda = dev.startswith("cuda")
        torch.set_num_threads(a.threads)
        try:
            torch.use_deterministic_algorithms(True)  # as server.main does
        except Exception:  # noqa: BLE001
            pass
        # no prefix cache: every measurement runs its whole context (bf16 and fp32 send the same prompts)
        self.engine = Engine(dev, dev, False, "", a.threads, None, a.max_batch, prefix_cache_bytes=0)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def peak_gib(self):
        if self.cuda:
            return torch.cuda.max_memory_allocated() / 2 ** 30
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20

    def on_device(self, fn, dtype):
        """fn() as an engine device job: bf16 under the queue's autocast (CUDA), as --dtype bf16 runs it."""
        cpu_bf16 = dtype == "bf16" and not self.cuda

        def job(_):
            if cpu_bf16:
                with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                    return fn()
            return fn()
        self.engine.queue.autocast = torch.bfloat16 if dtype == "bf16" and self.cuda else None
        return self.engine._device(job)

    def measure(self, model, dtype, what, fn):
        """Run fn() -> dict of results, timed and with its peak memory; record skip / OOM / error instead of failing."""
        row = {"model": model, "dtype": dtype, "what": what}
        elapsed = time.monotonic() - self.t0
        if elapsed > self.a.budget_s:
            row["status"] = f"skipped: past --budget-s {self.a.budget_s:g} ({elapsed:.0f} s)"
        else:
            try:
                if self.cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                self.sync()
                t = time.perf_counter()
                row.update(fn())
                self.sync()
                row["wall_s"] = time.perf_counter() - t
                row["peak_gib"] = self.peak_gib()
                row["status"] = "ok"
            except Exception as e:  # noqa: BLE001
                oom = "out of memory" in str(e).lower()
                row["status"] = "OOM" if oom else f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                if self.cuda:
                    torch.cuda.empty_cache()
        self.rows.append(row)
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k not in ("logprobs",)}
        print(f"[{time.monotonic() - self.t0:7.1f} s] {json.dumps(shown)}", flush=True)
        self.save()
        return row

    def save(self):
        rows = [{k: v for k, v in r.items() if k != "logprobs"} for r in self.rows]
        tmp = self.a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"meta": self.meta, "rows": rows}, f, indent=1)
        os.replace(tmp, self.a.out)

    # ---- measurements
    def generate(self, model, W, spec, B, new_tokens, dtype):
        V = spec["vocabSize"]
        rng = np.random.default_rng(1000 + B)
        sp = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_tokens": new_tokens, "stop": set()}
        rows = [([int(x) for x in rng.integers(0, V, self.a.prompt)], 7 + i, sp) for i in range(B)]
        call = GenerateCall("bench", f"generate-{B}", rows)
        spent = {"steps_s": 0.0, "sample_s": 0.0}
        eng = self.engine

        def timed(fn, key):
            def wrapped(*args, **kw):
                self.sync()
                t = time.perf_counter()
                try:
                    return fn(*args, **kw)
                finally:
                    self.sync()
                    spent[key] += time.perf_counter() - t
            return wrapped
        orig_sample = generation.sample_rows
        model.step = timed(type(model).step.__get__(model), "steps_s")
        generation.sample_rows = timed(orig_sample, "sample_s")
        try:
            t = time.perf_counter()
            out = self.on_device(lambda: eng._generate_batch(model, W, [call]), dtype)
            self.sync()
            wall = time.perf_counter() - t
        finally:
            del model.step
            generation.sample_rows = orig_sample
        n = sum(len(s.tokens) for s in out[0])
        spent["rest_s"] = wall - sum(spent.values())
        return {"batch": B, "new_tokens": n, "tokens_per_s": n / wall, **spent}

    def update_samples(self, spec):
        V = spec["vocabSize"]
        rng = np.random.default_rng(2024)
        C, T = self.a.prompt, self.a.update_len - self.a.prompt
        old = -math.log(V)  # about what a random-init model gives every token
        out = []
        for _ in range(self.a.update_seqs):
            out.append({"context": [int(x) for x in rng.integers(0, V, C)], "tokens": [int(x) for x in rng.integers(0, V, T)],
                        "loss_mask": [1] * T, "advantages": [float(x) for x in rng.choice([-1.0, 1.0], T)],
                        "old_logprobs": [old] * T, "loss_weights": [1.0 / T] * T, "ref_logprobs": []})
        return out

    def update(self, model, theta, samples, dtype):
        st = settings_of(None)
        P = theta.numel()
        m = torch.zeros(P, device=self.device)
        v = torch.zeros(P, device=self.device)
        S = max(len(s["context"]) + len(s["tokens"]) - 1 for s in samples)
        groups = micro_batch_plan(model.spec, samples, S, self.engine.micro_batch_bytes)
        res = self.on_device(lambda: run_update(model, theta, m, v, 0, samples, st, None, self.engine.micro_batch_bytes), dtype)
        self.sync()
        ntok = res[5]
        loss = res[4][0]["loss"]
        return {"trained_tokens": ntok, "micro_batches": len(groups), "rows_per_micro_batch": len(groups[0]), "loss": loss}

    def update_lora(self, spec, model, theta, samples, dtype):
        """A rank-r adapter on every projection over θ (lora.LoraModel), one Update."""
        targets = ["q", "k", "v", "o", "g", "u", "d"]
        lspec = {**spec, "lora": {"rank": self.a.lora_rank, "alpha": 2.0 * self.a.lora_rank, "targets": targets, "baseSeed": 1}}
        lm = LoraModel(lspec, model, theta)
        phi = init_adapter(lspec, 1).to(self.device)
        out = self.update(lm, phi, samples, dtype)
        out["adapter_params"] = lm.P
        return out

    def score(self, model, W, samples, dtype):
        eng = self.engine

        def run():
            return [lp for lp, _ in eng._score_many(model, W, [(s["context"], s["tokens"]) for s in samples])]
        lps = self.on_device(run, dtype)
        n = sum(len(x) for x in lps)
        return {"scored_tokens": n, "logprobs": lps}

    def run(self):
        a = self.a
        self.meta = {"device": self.device, "device_name": torch.cuda.get_device_name(0) if self.cuda else "cpu",
                     "torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "stubs": STUBS,
                     "threads": a.threads, "max_batch": a.max_batch, "max_seq": a.max_seq, "prompt": a.prompt,
                     "new_tokens": a.new_tokens, "update": f"{a.update_seqs} x {a.update_len} tokens ({a.prompt} context)",
                     "micro_batch_bytes": self.engine.micro_batch_bytes, "budget_s": a.budget_s,
                     "memory_budget_bytes": self.engine.memory_bytes, "models": {}}
        print(f"# {json.dumps(self.meta)}", flush=True)
        for name in a.models:
            spec, note = make_spec(name, a.max_seq)
            P = specmod.param_layout(spec)[1]
            slots = memory.run_slots(spec, self.engine.memory_bytes, a.max_batch)
            self.meta["models"][name] = {"params": P, "cache_slots": slots, "note": note, "spec": spec}
            print(f"# model {name}: {P:,} parameters, {slots} cache slots{'; ' + note if note else ''}", flush=True)
            if time.monotonic() - self.t0 > a.budget_s:
                self.measure(name, "-", "build", lambda: {})
                continue
            model = hf.HfTransformer(spec, self.device)
            built = {}
            row = self.measure(name, "fp32", "build (θ init on device)",
                               lambda: built.update(theta=init_theta(spec, self.device)) or {"params": P})
            if row["status"] != "ok":
                continue
            theta = built.pop("theta")
            self.models(name, spec, model, theta)
            theta = model = None  # free the device memory before the next model
            if self.cuda:
                torch.cuda.empty_cache()
        self.table()

    def models(self, name, spec, model, theta):
        """Every measurement of one model, for each dtype."""
        a = self.a
        W = model.weights(theta, inference=True)
        samples = self.update_samples(spec)
        fp32_lps = None
        for dtype in a.dtypes:
            if dtype == "bf16" and not self.cuda and not a.cpu_bf16:
                self.rows.append({"model": name, "dtype": dtype, "what": "all",
                                  "status": "skipped: bf16 needs CUDA (the engine refuses --dtype bf16 on CPU)"})
                continue
            short = samples[:2]
            warm = [dict(s, tokens=s["tokens"][:16], loss_mask=[1] * 16, advantages=s["advantages"][:16],
                         old_logprobs=s["old_logprobs"][:16], loss_weights=s["loss_weights"][:16]) for s in short]
            self.measure(name, dtype, "warm-up", lambda: {
                "generate": self.generate(model, W, spec, 1, 4, dtype)["new_tokens"],
                "update": self.update(model, theta, warm, dtype)["trained_tokens"]})
            if "generate" not in a.skip:
                for B in a.batches:
                    self.measure(name, dtype, f"generate batch {B}", lambda: self.generate(model, W, spec, B, a.new_tokens, dtype))
            if "update" not in a.skip:
                r = self.measure(name, dtype, f"update {a.update_seqs}x{a.update_len}", lambda: self.update(model, theta, samples, dtype))
                if r["status"] == "ok":
                    r["tokens_per_s"] = r["trained_tokens"] / r["wall_s"]
                    self.save()
            if "update-lora" not in a.skip:
                r = self.measure(name, dtype, f"update-lora {a.update_seqs}x{a.update_len}",
                                 lambda: self.update_lora(spec, model, theta, samples, dtype))
                if r["status"] == "ok":
                    r["tokens_per_s"] = r["trained_tokens"] / r["wall_s"]
                    self.save()
            if "score" not in a.skip:
                r = self.measure(name, dtype, f"score {a.update_seqs}x{a.update_len}", lambda: self.score(model, W, samples, dtype))
                if r["status"] == "ok":
                    r["tokens_per_s"] = r["scored_tokens"] / r["wall_s"]
                    if dtype == "fp32":
                        fp32_lps = r["logprobs"]
                    elif fp32_lps is not None:
                        d = np.abs(np.concatenate([np.array(x, dtype=np.float64) - np.array(y, dtype=np.float64)
                                                   for x, y in zip(r["logprobs"], fp32_lps)]))
                        r["gap_vs_fp32_max"], r["gap_vs_fp32_mean"] = float(d.max()), float(d.mean())
                    r.pop("logprobs")
                    self.save()

    def table(self):
        print("\n| model | dtype | measurement | result | wall s | peak GiB | notes |\n| --- | --- | --- | --- | --- | --- | --- |")
        for r in self.rows:
            if r["status"] != "ok":
                print(f"| {r['model']} | {r['dtype']} | {r['what']} | {r['status']} | | | |")
                continue
            res, notes = "", ""
            if "batch" in r:
                res = f"{r['tokens_per_s']:,.1f} new tokens/s"
                notes = f"steps {r['steps_s']:.2f} s, sampling {r['sample_s']:.2f} s, rest {r['rest_s']:.2f} s"
            elif "trained_tokens" in r and "tokens_per_s" in r:
                res = f"{r['tokens_per_s']:,.0f} trained tokens/s"
                notes = f"{r['micro_batches']} micro-batches of {r['rows_per_micro_batch']}; loss {r['loss']:.4g}"
            elif "scored_tokens" in r:
                res = f"{r['tokens_per_s']:,.0f} scored tokens/s"
                if "gap_vs_fp32_max" in r:
                    notes = f"abs Δ logprob vs fp32: max {r['gap_vs_fp32_max']:.3g}, mean {r['gap_vs_fp32_mean']:.3g}"
            elif "params" in r:
                res = f"{r['params']:,} parameters"
            peak = "RSS " if not self.cuda else ""
            print(f"| {r['model']} | {r['dtype']} | {r['what']} | {res} | {r['wall_s']:.2f} | {peak}{r['peak_gib']:.2f} | {notes} |")
        print("\nThe earlier engine on an NVIDIA H200 (bench/results/pytorch-gpu-h200.md; 0.5b, hand-written model, fp32, prompt 64 + 128 new): "
              + "; ".join(f"{k} {v}" for k, v in EARLIER.items()))
        print(f"\ndevice: {self.meta.get('device_name')} (torch {torch.__version__}); total {time.monotonic() - self.t0:.0f} s; "
              f"budget {self.a.budget_s:g} s; JSON: {self.a.out}", flush=True)


if __name__ == "__main__":
    Bench(parse()).run()
