"""Data-parallel Updates over N processes with torch.distributed (`--device cpu,cpu` or `--device cuda:0,cuda:1`).

The engine process is rank 0: it serves gRPC, runs Generate and Score on its own device, and starts ranks 1..N-1
as child processes (`python3 parallel.py --rank R ...`, one per further device) that join one process group (gloo
on CPU, NCCL on CUDA) and only compute gradients. Troupe sees one engine endpoint. Per Update, rank 0 broadcasts the
samples; the batch is cut into N contiguous shards of ceil(B / N) sequences, rank r takes shard r and cuts it into
micro-batches by the engine's rule (update.py) on the whole batch's length. Per inner step rank 0 broadcasts θ, every
rank sums its shard's gradient, an all-reduce adds the N sums, and rank 0 clips and steps AdamW (float32 master
weights and state, only there). The result equals one process's within float32 rounding of the order of the
additions (the test: 2 gloo ranks against 1 process, within 1e-6).

Children end with rank 0: each exits when its stdin (a pipe from rank 0) closes, as a SIGKILL of rank 0 does.
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import threading

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from hf import runtime_for  # noqa: E402
from update import SUM_KEYS, build_batch, gradient, micro_batch_plan  # noqa: E402

# idle ranks wait in a broadcast between Updates: no collective timeout short of a year
IDLE_TIMEOUT = datetime.timedelta(days=365)
GO, DONE = 1, 0


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


class ShardGradients:
    """Rank r's part of one Update: its micro-batches, and the all-reduced gradient and sums at a broadcast θ."""

    def __init__(self, model, samples, st, micro_batch_bytes, checkpoint_layers, S):
        self.model = model
        self.st = st
        self.checkpoint_layers = checkpoint_layers
        self.batches = [build_batch(b, model.device, S) for b in micro_batch_plan(model.spec, samples, S, micro_batch_bytes, checkpoint_layers)]

    def at(self, theta):
        dist.broadcast(theta, 0)
        g, sums = gradient(self.model, theta, self.batches, self.st, self.checkpoint_layers)
        vec = torch.tensor([sums[k] for k in SUM_KEYS], dtype=torch.float64, device=g.device)
        dist.all_reduce(g)
        dist.all_reduce(vec)
        return g, dict(zip(SUM_KEYS, vec.tolist()))


class DataParallel:
    """Rank 0's handle on the group: starts the other ranks, and runs an Update's gradients across all of them."""

    def __init__(self, devices, threads, dtype="fp32"):
        self.devices = devices
        self.world = len(devices)
        self.store = tempfile.NamedTemporaryFile(prefix="troupe-dist-", delete=False).name
        os.unlink(self.store)  # the file store creates it
        self.children = [
            subprocess.Popen([sys.executable, os.path.join(HERE, "parallel.py"), "--rank", str(r), "--world-size", str(self.world),
                              "--store", self.store, "--device", devices[r], "--threads", str(threads), "--dtype", dtype],
                             stdin=subprocess.PIPE)
            for r in range(1, self.world)
        ]
        _init(0, self.world, self.store, devices[0])

    def start(self, model, samples, st, micro_batch_bytes, checkpoint_layers, S):
        """Sends an Update's job to every rank; returns (gradient_at(θ) → (g, sums), finish())."""
        parts = shards(samples, self.world)
        dist.broadcast_object_list([{"spec": model.spec, "shards": parts, "st": st, "mbb": micro_batch_bytes,
                                     "ckpt": checkpoint_layers, "S": S}], src=0)
        own = ShardGradients(model, parts[0], st, micro_batch_bytes, checkpoint_layers, S)
        control = torch.zeros(1, dtype=torch.long, device=model.device)

        def gradient_at(theta):
            control.fill_(GO)
            dist.broadcast(control, 0)
            return own.at(theta.detach().clone())

        def finish():  # also after a failed step: the other ranks go back to waiting for a job
            control.fill_(DONE)
            dist.broadcast(control, 0)
        return gradient_at, finish


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
    _init(rank, world, store, device)
    models = {}
    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0)
        job = box[0]
        key = repr(sorted(job["spec"].items()))
        model = models.get(key) or models.setdefault(key, runtime_for(job["spec"], device))
        mine = ShardGradients(model, job["shards"][rank], job["st"], job["mbb"], job["ckpt"], job["S"])
        control = torch.zeros(1, dtype=torch.long, device=device)
        theta = torch.empty(model.P, dtype=torch.float32, device=device)
        while True:
            dist.broadcast(control, 0)
            if int(control.item()) == DONE:
                break
            if dtype == "bf16":
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    mine.at(theta)
            else:
                mine.at(theta)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description="a further rank of the PyTorch engine's data-parallel Updates (started by server.py)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="fp32")
    a = p.parse_args()
    worker(a.rank, a.world_size, a.store, a.device, a.threads, a.dtype)
