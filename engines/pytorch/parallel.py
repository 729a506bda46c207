"""Updates over N processes with torch FSDP2 (`fully_shard`; `--device cpu,cpu` or `--device cuda:0,cuda:1`).

The engine process is rank 0: it serves gRPC, runs Generate and Score on its own device, and starts ranks 1..N-1
as child processes (`python3 parallel.py --rank R ...`, one per further device) that join one process group (gloo
on CPU, NCCL on CUDA) over a 1-D DeviceMesh and only take part in Updates. Troupe sees one engine endpoint.

An Update of a full-fine-tuning model runs on every rank: each holds the model as a transformers module (FsdpLoss)
with each decoder layer and the root `fully_shard`ed, so a rank keeps 1/N of the parameters, gradients and AdamW
state. Per Update rank 0 broadcasts the job (spec, samples, settings) and then θ, m and v of the version parameter by
parameter (hf.weights: the engine's flat layout → transformers' tensors), each rank keeping its own dim-0 shard. The
batch is cut into N contiguous shards of ceil(B / N) sequences; rank r takes shard r and cuts it into micro-batches
by the engine's rule (update.py) on the whole batch's length. Per inner step every rank runs the same number of
forward/backward passes (a rank short of micro-batches runs a zero-weight one: FSDP's all-gathers are collective);
each pass's gradient is reduce-scattered (a sum, not FSDP's default mean) and added to the rank's gradient shard, so
no rank holds a whole gradient (accumulating unreduced gradients over micro-batches would: one reduce-scatter, a
full-size buffer); torch.optim.AdamW steps the shards after global-norm clipping (clip_grad_norm_'s formula on the
DTensor gradients). After the last step θ, m and v are gathered to rank 0 (full_tensor) and put back in the flat
layout (hf.unweights). The loss of a micro-batch, trunk and chunked head, is one forward of the root module
(update.row_terms and policy_loss, the rule of the single-process path), as FSDP2 gathers the root's parameters
(embedding, final norm, head) in the root's forward only. The result is one process's update within float32
rounding: the order of the gradient's additions (ranks per micro-batch, then micro-batches) and torch's AdamW (lerp,
addcdiv) instead of update.py's hand-written one (the test: 2 gloo ranks against 1 process).

This replaces plain data parallelism (θ broadcast per step, full gradients all-reduced, AdamW on rank 0 alone): one
multi-rank path, and the one that scales, as no rank but 0 holds a full copy of the parameters or optimizer state
between collectives (rank 0 holds the versions anyway). A LoRA model's Update runs on rank 0 alone (engine.py).

Children end with rank 0: each exits when its stdin (a pipe from rank 0) closes, as a SIGKILL of rank 0 does. A
child whose Update fails (one that fails on every rank alike, as a non-finite loss or gradient norm does) goes back
to waiting for the next job.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from hf import runtime_for  # noqa: E402
from update import SUM_KEYS, NonFiniteUpdate, build_batch, f32, metrics, micro_batch_plan, policy_loss, row_terms  # noqa: E402

# idle ranks wait in a broadcast between Updates: no collective timeout short of a year
IDLE_TIMEOUT = datetime.timedelta(days=365)
# a micro-batch that adds nothing (one trained row of weight 0): what a rank short of micro-batches runs
ZERO_SAMPLE = {"context": [0], "tokens": [0], "loss_mask": [1], "advantages": [0.0], "old_logprobs": [0.0], "loss_weights": [0.0],
               "ref_logprobs": []}


def log(event, **fields):
    sys.stderr.write(json.dumps({"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}) + "\n")
    sys.stderr.flush()


def shards(samples, n):
    """N contiguous shards of ceil(B / N) sequences (the last ones may be short or empty)."""
    per = -(-len(samples) // n)
    return [samples[r * per:(r + 1) * per] for r in range(n)]


def _init(rank, world, store_file, device):
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback: the ranks are on one machine
    else:
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank, world_size=world, timeout=IDLE_TIMEOUT)
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cuda" if backend == "nccl" else "cpu", (world,))


class FsdpLoss(torch.nn.Module):
    """The model of a spec as a transformers module with real (FSDP2-sharded) parameters; forward(batch) → (log π of
    the trained rows' targets, their entropies), trunk and head in this one forward (update.row_terms)."""

    def __init__(self, model, mesh, checkpoint_layers):
        from torch.distributed._composable import checkpoint
        from torch.distributed.fsdp import fully_shard
        from transformers.modeling_layers import GradientCheckpointingLayer
        super().__init__()
        self.runtime = model
        self.lm = model.build_module()  # the engine's attention ("troupe"): on whole sequences, torch's SDPA (hf.attention)
        buffers = {n: b.clone() for n, b in self.lm.named_buffers()}
        self.units = [m for m in self.lm.modules() if isinstance(m, GradientCheckpointingLayer)]  # the decoder layers
        for layer in self.units:
            if checkpoint_layers:  # each layer's activations recomputed in the backward (before fully_shard: its hooks wrap the recompute)
                checkpoint(layer)
            fully_shard(layer, mesh=mesh)
        # the root keeps its parameters (embedding, final norm, head) gathered after the forward: the head chunks
        # rerun in the backward (update.row_terms checkpoints them)
        fully_shard(self, mesh=mesh, reshard_after_forward=False)
        self.to_empty(device=model.device)  # each rank's shards allocated; θ fills them per Update
        with torch.no_grad():
            for n, b in self.named_buffers():
                b.copy_(buffers[n[len("lm."):]])
        for unit in [*self.units, self]:  # a sum over ranks (the loss is a sum), not FSDP's mean
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)
        self.params = dict(self.lm.named_parameters())  # transformers' names (a tied head once): hf.weights' keys

    def forward(self, batch):
        base = getattr(self.lm, self.lm.base_model_prefix)
        head = {self.runtime.head_name: self.lm.get_parameter(self.runtime.head_name)}  # gathered in this forward

        def trunk(tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)[None].expand(tokens.shape[0], -1)
            return base(input_ids=tokens, position_ids=pos, use_cache=False).last_hidden_state
        return row_terms(trunk, lambda x: self.runtime.head(head, x), batch, self.runtime.spec["vocabSize"])

    def load(self, full_of, shard_of):
        """Each parameter's shard from full_of(name) (rank 0's tensor, broadcast); shard_of(name, DTensor) → its use."""
        from torch.distributed.tensor import distribute_tensor
        out = {}
        for name, p in self.params.items():
            full = full_of(name)
            buf = full.detach().to(torch.float32).contiguous() if dist.get_rank() == 0 else torch.empty(p.shape, dtype=torch.float32, device=p.device)
            dist.broadcast(buf, 0)
            out[name] = shard_of(name, distribute_tensor(buf, p.device_mesh, p.placements, src_data_rank=None))
            del buf
        return out

    def own(self, name, d):
        """DTensor d's shard as a tensor of its own (d's local shard is a view of the whole broadcast buffer)."""
        from torch.distributed.tensor import DTensor
        p = self.params[name]
        return DTensor.from_local(d.to_local().clone(), p.device_mesh, p.placements, run_check=False, shape=p.shape, stride=p.stride())

    def shard_sizes(self):
        return sum(p.to_local().numel() for p in self.params.values())


def _fsdp_update(fsdp, model, theta, m, v, step, mine, st, mbb, ckpt, S, autocast, on_step=None):
    """One Update on this rank (every rank runs it, rank 0 with the version's θ, m, v; None elsewhere). Returns rank 0's
    (θ, m, v, step, [metrics per step]), None elsewhere."""
    rank = dist.get_rank()
    device = model.device
    W = {k: model.weights(x) for k, x in (("theta", theta), ("m", m), ("v", v))} if rank == 0 else None

    def full(key):
        return lambda name: W[key][name] if rank == 0 else None

    with torch.no_grad():
        fsdp.load(full("theta"), lambda name, d: fsdp.params[name].to_local().copy_(d.to_local()))
        ms = fsdp.load(full("m"), fsdp.own)
        vs = fsdp.load(full("v"), fsdp.own)
    W = None
    params = list(fsdp.params.values())
    cuda = str(device).startswith("cuda")
    opt = torch.optim.AdamW(params, lr=f32(st["lr"]), betas=(f32(st["beta1"]), f32(st["beta2"])), eps=f32(st["eps"]),
                            weight_decay=f32(st["weight_decay"]), foreach=False, fused=True if cuda else None)
    for name, p in fsdp.params.items():  # the version's moments and step count, in torch's AdamW's state
        opt.state[p] = {"step": torch.tensor(float(step), dtype=torch.float32, device=device if cuda else "cpu"),
                        "exp_avg": ms[name], "exp_avg_sq": vs[name]}
    del ms, vs
    plan = micro_batch_plan(model.spec, mine, S, mbb, ckpt)
    batches = [build_batch(b, device, S) for b in plan]
    batches = [b for b in batches if b["n"] > 0]  # no trained token: its gradient and sums are zeros
    passes = torch.tensor([len(batches)], dtype=torch.long, device=device)
    dist.all_reduce(passes, op=dist.ReduceOp.MAX)
    zero = build_batch([ZERO_SAMPLE], device, 1)
    steps = []
    for k in range(st["inner_steps"]):
        opt.zero_grad(set_to_none=True)
        sums = dict.fromkeys(SUM_KEYS, 0.0)
        n = int(passes.item())
        for i in range(n):
            batch = batches[i] if i < len(batches) else zero
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast):
                lp, H = fsdp(batch)
            loss, mb = policy_loss(lp.float(), H.float(), batch, st)
            loss.backward()
            if i < len(batches):
                sums = {key: sums[key] + mb[key] for key in SUM_KEYS}
        vec = torch.tensor([sums[key] for key in SUM_KEYS], dtype=torch.float64, device=device)
        dist.all_reduce(vec)
        step_metrics = metrics(dict(zip(SUM_KEYS, vec.tolist())))
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        step_metrics["grad_norm"] = float(norm.item())
        steps.append(step_metrics)
        if not math.isfinite(step_metrics["loss"]) or not math.isfinite(step_metrics["grad_norm"]):  # alike on every rank
            raise NonFiniteUpdate(k, step_metrics["loss"], step_metrics["grad_norm"], f"inner step {k}")
        if st["max_grad_norm"] > 0:
            torch.nn.utils.clip_grads_with_norm_(params, f32(st["max_grad_norm"]), norm)
        opt.step()
        if on_step:
            on_step(k + 1)
    out = {}
    with torch.no_grad():  # full tensors (an all-gather each), kept on rank 0
        for key, of in (("theta", lambda p: p), ("m", lambda p: opt.state[p]["exp_avg"]), ("v", lambda p: opt.state[p]["exp_avg_sq"])):
            full_ = {}
            for name, p in fsdp.params.items():
                t = of(p).full_tensor()
                if rank == 0:
                    full_[name] = t
                del t
            out[key] = model.unweights(full_) if rank == 0 else None
            del full_
    opt.zero_grad(set_to_none=True)  # the shards' gradients and moments end with this call; the cached module keeps its parameter shards
    if rank != 0:
        return None
    if not bool(torch.isfinite(out["theta"]).all()):
        raise NonFiniteUpdate(len(steps) - 1, steps[-1]["loss"], steps[-1]["grad_norm"], "final weights")
    return out["theta"], out["m"], out["v"], step + st["inner_steps"], steps


class Ranks:
    """The group's state on one rank: its device mesh and its FSDP modules, one per (spec, checkpointing)."""

    def __init__(self, rank, world, store, device):
        self.device = device
        self.mesh = _init(rank, world, store, device)
        self.modules = {}

    def module(self, model, ckpt):
        key = (repr(sorted(model.spec.items())), bool(ckpt))
        if key not in self.modules:
            fsdp = FsdpLoss(model, self.mesh, ckpt)
            sizes = [None] * dist.get_world_size()
            dist.all_gather_object(sizes, fsdp.shard_sizes())
            if dist.get_rank() == 0:  # every rank's own shard: the test's evidence that the children sharded
                log("fsdp", world_size=dist.get_world_size(), params=model.P, units=len(fsdp.units) + 1, shard_params=sizes,
                    activation_checkpointing=bool(ckpt))
            self.modules[key] = fsdp
        return self.modules[key]


class Fsdp:
    """Rank 0's handle on the group: starts the other ranks, and runs an Update across all of them."""

    def __init__(self, devices, threads, dtype="fp32"):
        self.devices = devices
        self.world = len(devices)
        self.dtype = dtype
        store = tempfile.NamedTemporaryFile(prefix="troupe-dist-", delete=False).name
        os.unlink(store)  # the file store creates it
        self.children = [
            subprocess.Popen([sys.executable, os.path.join(HERE, "parallel.py"), "--rank", str(r), "--world-size", str(self.world),
                              "--store", store, "--device", devices[r], "--threads", str(threads), "--dtype", dtype],
                             stdin=subprocess.PIPE)
            for r in range(1, self.world)
        ]
        self.ranks = Ranks(0, self.world, store, devices[0])

    def update(self, model, theta, m, v, step, samples, st, on_step, micro_batch_bytes, checkpoint_layers, S):
        """(θ, m, v, step, [metrics per step]) of an Update run on every rank."""
        parts = shards(samples, self.world)
        dist.broadcast_object_list([{"spec": model.spec, "shards": parts, "st": st, "mbb": micro_batch_bytes,
                                     "ckpt": checkpoint_layers, "S": S, "step": step}], src=0)
        fsdp = self.ranks.module(model, checkpoint_layers)
        return _fsdp_update(fsdp, model, theta, m, v, step, parts[0], st, micro_batch_bytes, checkpoint_layers, S,
                            self.dtype == "bf16", on_step)


def worker(rank, world, store, device, threads, dtype):
    torch.set_num_threads(threads)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # noqa: BLE001
        pass

    def watch():  # rank 0 is gone (its end of the pipe closed): so is this rank
        try:
            while sys.stdin.buffer.read(65536):
                pass
        finally:
            os._exit(0)
    threading.Thread(target=watch, daemon=True).start()
    ranks = Ranks(rank, world, store, device)
    models = {}
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0)
        job = box[0]
        key = repr(sorted(job["spec"].items()))
        model = models.get(key) or models.setdefault(key, runtime_for(job["spec"], device))
        try:
            fsdp = ranks.module(model, job["ckpt"])
            _fsdp_update(fsdp, model, None, None, None, job["step"], job["shards"][rank], job["st"], job["mbb"], job["ckpt"], job["S"],
                         dtype == "bf16")
        except Exception as e:  # noqa: BLE001 (rank 0 reports it; this rank waits for the next job)
            log("fsdp_update_failed", rank=rank, error=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="a further rank of the PyTorch engine's FSDP2 Updates (started by server.py)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="fp32")
    a = p.parse_args()
    worker(a.rank, a.world_size, a.store, a.device, a.threads, a.dtype)
