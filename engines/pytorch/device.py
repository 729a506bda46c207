"""The device worker: one thread runs every job on the device (init, load, generate, score, update) in FIFO order, merging
queued Generate jobs of one version (or of LoRA adapters over one base) into the run in front of them."""
import collections
import threading
import time
from concurrent import futures

import torch


# ---------------------------------------------------------------- device worker

class Job:
    def __init__(self, fn, kind, merge_key=None):
        self.fn = fn
        self.kind = kind
        self.future = futures.Future()
        self.started = False
        self.arrived = time.monotonic()
        # Generate jobs of one (model, version), or of LoRA adapters over one base, queued behind this one run with it
        # (see DeviceQueue._loop, Engine.Generate)
        self.merge_key = merge_key
        self.merged = []


class DeviceQueue:
    """One thread runs device work in FIFO order; with `autocast` (--dtype bf16 on CUDA) under torch.autocast at that
    type, so every forward of Generate, Score and Update computes in it while θ and the AdamW state stay float32."""

    def __init__(self):
        self.autocast = None
        self.cv = threading.Condition()
        self.pending = collections.deque()
        self.running = None
        self.completed = 0
        threading.Thread(target=self._loop, name="device", daemon=True).start()

    def submit(self, fn, kind="run", merge_key=None):
        job = Job(fn, kind, merge_key)
        with self.cv:
            self.pending.append(job)
            self.cv.notify()
        return job

    def position(self, job):
        with self.cv:
            try:
                return list(self.pending).index(job) + (1 if self.running is not None else 0)
            except ValueError:
                return 0

    @property
    def depth(self):
        with self.cv:
            return sum(1 for j in self.pending if not j.future.done()) + (1 if self.running is not None else 0)

    def progress(self, n=1):
        with self.cv:
            self.completed += n

    def _loop(self):
        while True:
            with self.cv:
                while not self.pending:
                    self.cv.wait()
                job = self.pending.popleft()
                if job.future.done():  # resolved while queued (aborted Generate)
                    continue
                self.running = job
                job.started = True
                if job.merge_key is not None:  # concurrent Generate calls of the same version (or base) share the device run
                    job.merged = [j for j in self.pending if j.merge_key == job.merge_key and not j.future.done()]
                    for j in job.merged:
                        self.pending.remove(j)
                        j.started = True
            try:
                if self.autocast is None:
                    res = job.fn(job)
                else:
                    with torch.autocast(device_type="cuda", dtype=self.autocast):
                        res = job.fn(job)
                if not job.future.done():
                    job.future.set_result(res)
            except BaseException as e:  # noqa: BLE001
                for j in [job] + job.merged:
                    if not j.future.done():
                        j.future.set_exception(e)
            finally:
                with self.cv:
                    self.running = None
                    self.completed += 1
