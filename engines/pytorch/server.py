#!/usr/bin/python3
"""Troupe engine protocol v2 (engines/protocol/engine.proto) in Python + PyTorch, for the
"transformer" family. See README.md.

    /usr/bin/python3 engines/pytorch/server.py --port 50061 [--device cpu|cuda:N|auto] [--exit-with-stdin]

gRPC handler threads validate and enqueue; one device worker thread runs the device
work (init, load, generate, score, update) in FIFO order.
"""
import argparse
import bisect
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import weakref
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "protocol"))
PROTO = os.path.join(PROTO_DIR, "engine.proto")
GEN = os.path.join(HERE, ".gen")
PROTOCOL_VERSION = 2
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024  # each chunk message within gRPC's default 4 MiB receive limit
# the engine contract's data (error reasons, update defaults, limits), shared with the TypeScript side
with open(os.path.join(PROTO_DIR, "contract.json")) as _f:
    CONTRACT = json.load(_f)
MAX_TOKENS_LIMIT = CONTRACT["limits"]["maxTokens"]
INNER_STEPS_LIMIT = CONTRACT["limits"]["innerSteps"]
MODEL_KEY_LIMIT = CONTRACT["limits"]["modelKeyLength"]
REQUEST_ID_LIMIT = CONTRACT["limits"]["requestIdLength"]
MAX_VERSIONS_PER_MODEL = 64
MAX_REMEMBERED_UPDATES = 4096
PROGRESS_EVERY_S = 1.0
DEFAULT_MICRO_BATCH_BYTES = 256 * 2 ** 20  # the built-in engine's --micro-batch-bytes default
DTYPES = ("fp32", "bf16")  # compute types; weights and AdamW state stay float32 (master copies) in both


def log(event, **fields):
    sys.stderr.write(json.dumps({"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}) + "\n")
    sys.stderr.flush()


def fail_start(message):
    sys.stderr.write(f"troupe-pytorch engine: {message}\n")
    sys.stderr.flush()
    sys.exit(1)


# ---------------------------------------------------------------- stubs

def ensure_stubs():
    """Generate engine_pb2*.py into .gen/ with grpcio-tools' protoc when missing, older than the
    proto, or made by another grpcio-tools (temp dir, then rename)."""
    try:
        import grpc_tools
    except ImportError:
        fail_start("grpcio-tools is needed to generate the gRPC stubs (engines/pytorch/requirements.txt)")
    stamp = os.path.join(GEN, "GRPC_TOOLS_VERSION")
    tools_version = _dist_version("grpcio-tools")
    target = os.path.join(GEN, "engine_pb2_grpc.py")
    fresh = (
        os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(PROTO)
        and os.path.exists(stamp) and open(stamp).read().strip() == tools_version
    )
    if not fresh:
        tmp = tempfile.mkdtemp(prefix=".gen-", dir=HERE)
        os.chmod(tmp, 0o755)
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        r = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", "engine.proto"],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            fail_start(f"protoc failed: {r.stderr.strip()}")
        with open(os.path.join(tmp, "GRPC_TOOLS_VERSION"), "w") as f:
            f.write(tools_version + "\n")
        # replace atomically; another engine starting at the same time may win the race (its stubs are equal)
        old = None
        if os.path.exists(GEN):
            old = tempfile.mkdtemp(prefix=".gen-old-", dir=HERE)
            os.rmdir(old)
            try:
                os.rename(GEN, old)
            except OSError:
                old = None
        try:
            os.rename(tmp, GEN)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    sys.path.insert(0, GEN)


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


# ---------------------------------------------------------------- flags (parsed before heavy imports)

def parse_args(argv):
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            fail_start(f"bad flag: {message}")

    p = Parser(description="Troupe engine (protocol v2) in PyTorch")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--exit-with-stdin", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--memory-bytes", default=os.environ.get("TROUPE_ENGINE_MEMORY_BYTES"))
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--rss-limit-bytes", default=os.environ.get("TROUPE_ENGINE_RSS_LIMIT_BYTES"))
    p.add_argument("--micro-batch-bytes", type=int, default=DEFAULT_MICRO_BATCH_BYTES)
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--dtype", default="fp32")
    a = p.parse_args(argv)
    if a.micro_batch_bytes < 1:
        fail_start(f"bad flag: --micro-batch-bytes must be a positive integer, got {a.micro_batch_bytes}")
    if a.dtype not in DTYPES:
        fail_start(f"bad flag: --dtype must be one of {', '.join(DTYPES)}, got {a.dtype!r}")
    if a.rss_limit_bytes is not None:
        what = "--rss-limit-bytes" if "--rss-limit-bytes" in " ".join(argv) else "--rss-limit-bytes (from TROUPE_ENGINE_RSS_LIMIT_BYTES)"
        if not str(a.rss_limit_bytes).isdigit() or int(a.rss_limit_bytes) < 1:
            fail_start(f"bad flag: {what} must be a positive integer, got {a.rss_limit_bytes!r}")
        a.rss_limit_bytes = int(a.rss_limit_bytes)
    if a.memory_bytes is not None:
        what = "--memory-bytes" if "--memory-bytes" in " ".join(argv) else "--memory-bytes (from TROUPE_ENGINE_MEMORY_BYTES)"
        if not str(a.memory_bytes).isdigit() or int(a.memory_bytes) < 1:
            fail_start(f"bad flag: {what} must be a positive integer, got {a.memory_bytes!r}")
        a.memory_bytes = int(a.memory_bytes)
    if not (0 <= a.port <= 65535):
        fail_start(f"bad flag: --port must be in [0, 65535], got {a.port}")
    if not (1 <= a.max_batch <= 4096):
        fail_start(f"bad flag: --max-batch must be in [1, 4096], got {a.max_batch}")
    if a.threads is not None and a.threads < 1:
        fail_start(f"bad flag: --threads must be >= 1, got {a.threads}")
    d = a.device
    a.devices = d.split(",")
    if len(a.devices) > 1:  # data-parallel Updates over these devices (parallel.py)
        if not (all(x == "cpu" for x in a.devices) or all(x.startswith("cuda:") and x[5:].isdigit() for x in a.devices)):
            fail_start(f'bad flag: --device with several devices must list cpu,cpu,... or cuda:N,cuda:M,..., got "{d}"')
        a.device = a.devices[0]
    elif not (d in ("cpu", "auto", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
        fail_start(f'bad flag: --device must be cpu, cuda:N, auto, or a list (cpu,cpu or cuda:0,cuda:1), got "{d}"')
    return a


ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
if __name__ == "__main__":
    ensure_stubs()
else:
    sys.path.insert(0, GEN)
sys.path.insert(0, HERE)

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import engine_pb2 as pb  # noqa: E402
import engine_pb2_grpc as pbg  # noqa: E402
import checkpoint  # noqa: E402
import faults as faultsmod  # noqa: E402
import hf  # noqa: E402
import memory  # noqa: E402
import philox  # noqa: E402
import watchdog  # noqa: E402
import spec as specmod  # noqa: E402
from lora import LoraModel, init_adapter  # noqa: E402
from init import init_weights  # noqa: E402
from steps import LORA  # noqa: E402
from sampling import sample_rows  # noqa: E402
from update import NonFiniteUpdate, run_update  # noqa: E402

# Health names the checkpoint loader in use: this engine's own (checkpoint.py), never transformers'
ENGINE_NAME = f"troupe-pytorch 2 (torch {torch.__version__}; checkpoints: {checkpoint.LOADER})"
BATCH_INVARIANCE = ("bit-identical: Score, Generate's prefill and its decode run the same steps (16 to 240 rows: sizes probed "
                    "per spec to give every row the bits of a 64-row matmul; each row attends to its own sequence's cache slot "
                    "over a probed key length, the later keys masked), max_batch slots (fewer when memory is short), continuous "
                    "batching, concurrent calls of one version sharing them, and of LoRA adapters over one base (each row its "
                    "own adapter, unmerged: a per-row batched matmul of one shape); so a row's bits depend only on its "
                    "sequence and its adapter, and Generate's log-probs are Score's; Philox noise per sequence and token")
REASON_CODE = {reason: getattr(grpc.StatusCode, code) for reason, code in CONTRACT["errorReasons"].items()}
RPCS = ["InitModel", "LoadVersion", "ExportVersion", "LoadVersionChunks", "ExportVersionChunks", "Generate", "Score",
        "Update", "UpdateStream", "Abort", "Health", "Stats"]


class Fault(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


def invalid(message):
    return Fault("INVALID_REQUEST", message)


# ---------------------------------------------------------------- byte formats (engines/protocol/version-bytes.ts)

MAGIC = b"TRAD"


def sha256_hex(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def encode_weights(theta: torch.Tensor) -> bytes:
    return theta.detach().cpu().numpy().astype("<f4", copy=False).tobytes()


def decode_weights(b: bytes, P: int) -> torch.Tensor:
    if len(b) != 4 * P:
        raise invalid(f"weights: expected {4 * P} bytes ({P} float32 parameters for this spec), got {len(b)}")
    a = np.frombuffer(b, dtype="<f4").astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise invalid(f"weights: parameter {int(bad[0])} is not finite ({a[bad[0]]})")
    return torch.from_numpy(a.copy())


def encode_optimizer(step: int, m: torch.Tensor, v: torch.Tensor) -> bytes:
    P = m.numel()
    head = MAGIC + np.array([1, step, P], dtype="<u4").tobytes()
    return head + m.detach().cpu().numpy().astype("<f4").tobytes() + v.detach().cpu().numpy().astype("<f4").tobytes()


def decode_optimizer(b: bytes, P: int):
    if len(b) == 0:
        return 0, torch.zeros(P), torch.zeros(P)
    if len(b) < 16 or b[:4] != MAGIC:
        raise invalid("optimizer_state: not a troupe AdamW state (bad magic); send empty bytes for a fresh optimizer")
    fmt, step, n = np.frombuffer(b[4:16], dtype="<u4").tolist()
    if fmt != 1:
        raise invalid(f"optimizer_state: unsupported format {fmt} (this engine reads 1)")
    if n != P or len(b) != 16 + 8 * n:
        raise invalid(f"optimizer_state: holds {n} parameters in {len(b)} bytes, this spec has {P}")
    m = np.frombuffer(b, dtype="<f4", count=n, offset=16).astype(np.float32)
    v = np.frombuffer(b, dtype="<f4", count=n, offset=16 + 4 * n).astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(m) | ~np.isfinite(v) | ~(v >= 0))
    if bad.size:
        i = int(bad[0])
        raise invalid(f"optimizer_state: moment {i} is invalid (m={m[i]}, v={v[i]})")
    return step, torch.from_numpy(m.copy()), torch.from_numpy(v.copy())


def path_of_uri(uri, field):
    u = urllib.parse.urlparse(uri)
    if u.scheme != "file":
        raise ValueError(f"{field}: only file:// references are supported (got {uri!r})")
    p = urllib.parse.unquote(u.path)
    if u.netloc not in ("", "localhost") or not os.path.isabs(p):
        raise ValueError(f"{field}: not a file:///absolute/path URI ({uri})")
    return p


def read_reference(ref, field):
    try:
        p = path_of_uri(ref.uri, f"{field}.uri")
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"{p}: cannot be read ({e.strerror})")
        if len(data) != ref.size:
            raise ValueError(f"{p}: holds {len(data)} bytes, the reference says {ref.size} (truncated or replaced)")
        actual = sha256_hex(data)
        if actual != ref.sha256.lower():
            raise ValueError(f"{p}: sha256 is {actual}, the reference says {ref.sha256} (damaged or replaced)")
        return data
    except ValueError as e:
        raise Fault("REFERENCE_UNREADABLE", f"{field}: {e}")


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


# ---------------------------------------------------------------- version cache (engines/onnx/version-cache.ts)

class Version:
    def __init__(self, number, theta, m, v, step):
        self.number = number
        self.theta, self.m, self.v, self.step = theta, m, v, step
        self.weights_sha256 = sha256_hex(encode_weights(theta))
        self.optimizer_sha256 = sha256_hex(encode_optimizer(step, m, v))
        self.last_used = 0


class ModelEntry:
    def __init__(self, key, spec, model):
        self.key, self.spec, self.model = key, spec, model
        self.versions = {}
        self.latest = -1


class VersionCache:
    def __init__(self, device):
        self.device = device
        self.models = {}
        self.lock = threading.RLock()
        self.clock = 0
        self.runtimes = {}
        # θ₀ by (spec key, seed) or directory: a LoRA base, one tensor however many adapters and models use it, kept while
        # one does (a version 0 the LRU evicts, with no adapter over it, goes)
        self.bases = weakref.WeakValueDictionary()

    def model(self, key):
        with self.lock:
            m = self.models.get(key)
            if m is None:
                raise Fault("MODEL_NOT_LOADED", f'model "{key}" is not loaded on this engine (InitModel or LoadVersion it first)')
            return m

    def version(self, key, number):
        with self.lock:
            m = self.model(key)
            v = m.versions.get(number)
            if v is None:
                held = ", ".join(str(x) for x in sorted(m.versions)) or "none"
                raise Fault(
                    "VERSION_NOT_LOADED",
                    f'model "{key}" version {number} is not loaded on this engine (loaded: {held}); LoadVersion it from the store and retry',
                )
            self.clock += 1
            v.last_used = self.clock
            return m, v

    def runtime(self, spec):
        k = specmod.spec_key(spec)
        with self.lock:
            if k not in self.runtimes:
                self.runtimes[k] = hf.runtime_for(spec, self.device)
            return self.runtimes[k]

    def ensure_model(self, key, spec):
        with self.lock:
            m = self.models.get(key)
            if m is not None:
                if specmod.spec_key(m.spec) != specmod.spec_key(spec):
                    raise Fault("VERSION_CONFLICT", f'model "{key}" is loaded with spec {json.dumps(m.spec)}, request has {json.dumps(spec)}')
                return m
            m = ModelEntry(key, spec, self.lora_model(spec) if "lora" in spec else self.runtime(spec))
            self.models[key] = m
            return m

    def shared_base(self, k, make):
        """One θ₀ tensor per key while anything uses it (versions are immutable, so nothing writes into it)."""
        with self.lock:
            theta = self.bases.get(k)
            if theta is None:
                theta = self.bases[k] = make().to(self.device)
            return theta

    def seeded(self, spec, seed):
        """θ₀ of a plain spec from its seed: a model's version 0 and the LoRA bases over it share it."""
        return self.shared_base((specmod.spec_key(spec), seed), lambda: init_weights(spec, seed))

    def lora_model(self, spec):
        base = specmod.base_spec(spec)
        d = spec["lora"].get("baseCheckpoint")
        if d is None:
            theta = self.seeded(base, spec["lora"]["baseSeed"])
        else:
            theta = self.shared_base(("checkpoint", d, specmod.spec_key(base)),
                                     lambda: load_checkpoint((d, base["maxSeq"]), "spec.lora.baseCheckpoint", base))
        return LoraModel(spec, self.runtime(base), theta)

    def put(self, m, number, theta, mom, vel, step):
        nv = Version(number, theta, mom, vel, step)
        with self.lock:
            old = m.versions.get(number)
            if old is not None:
                if old.weights_sha256 == nv.weights_sha256 and old.optimizer_sha256 == nv.optimizer_sha256:
                    return old
                what = "optimizer state" if old.weights_sha256 == nv.weights_sha256 else "weights"
                raise Fault("VERSION_CONFLICT", f'model "{m.key}" version {number} already exists here with different {what} (versions are immutable)')
            self.clock += 1
            nv.last_used = self.clock
            m.versions[number] = nv
            m.latest = max(m.latest, number)
            while len(m.versions) > MAX_VERSIONS_PER_MODEL:
                victims = [x for x in m.versions.values() if x.number != m.latest]
                if not victims:
                    break
                del m.versions[min(victims, key=lambda x: x.last_used).number]
            return nv


# ---------------------------------------------------------------- conversions

def spec_to_wire(s):
    return pb.ModelSpec(family=s["family"], vocab_size=s["vocabSize"], config_json=specmod.config_json(s))


def spec_from_wire(w, field="spec"):
    """The normalized spec, and (dir, maxSeq) when the config names a Hugging Face `checkpoint` (its config.json
    then gives the shape: the spec is the one the built-in loader, engines/checkpoints/hf-layout.ts, gives)."""
    if w is None:
        raise invalid(f"{field}: required")
    try:
        config = json.loads(w.config_json) if w.config_json else {}
    except ValueError:
        raise invalid(f"{field}.config_json: not valid JSON")
    if not isinstance(config, dict):
        raise invalid(f"{field}.config_json: must be a JSON object")
    if isinstance(config.get("lora"), dict) and "checkpoint" in config:
        # InitModel's form of an adapter over a checkpoint: the resolved shape, the directory as lora.baseCheckpoint
        lora = config["lora"]
        if "baseSeed" in lora or "baseCheckpoint" in lora:
            raise invalid(f"{field}.lora: over a checkpoint the base is the checkpoint; leave baseSeed and baseCheckpoint out")
        base, ck = spec_from_wire(pb.ModelSpec(family=w.family, vocab_size=w.vocab_size,
                                               config_json=json.dumps({k: v for k, v in config.items() if k != "lora"})), field)
        config = {**json.loads(specmod.config_json(base)), "lora": {**lora, "baseCheckpoint": ck[0]}}
        w = pb.ModelSpec(family=w.family, vocab_size=base["vocabSize"])
    try:
        if w.family == specmod.FAMILY and "hf" in config:  # a transformers spec, as VersionInfo gives it back
            if "lora" in config:
                raise invalid(f"{field}.lora: adapters over a transformers model (spec.hf) are not served by this engine yet")
            return hf.normalize(w.vocab_size, config, field), None
        ck = checkpoint.checkpoint_options(config, field) if w.family == specmod.FAMILY else None
        if ck is not None and checkpoint.model_type(ck[0]) not in (None, *checkpoint.MODEL_TYPES):  # transformers computes it
            return hf.resolve_checkpoint(ck[0], ck[1], field), ck
        if ck is None:
            s = specmod.normalize(w.family, w.vocab_size, config, field)
            if "lora" in s and "baseSeed" not in s["lora"] and "baseCheckpoint" not in s["lora"]:
                raise invalid(f"{field}.lora.baseSeed: required (the seed of the frozen base's version 0), or lora.baseCheckpoint")
            off = hf.not_computable(s, field)
            if off:
                raise invalid(f"{off[0]}: {off[1]}")
            return s, None
        try:
            s = checkpoint.resolve(ck[0], ck[1], field)[0]
        except checkpoint.Unsupported:  # a config the own layouts cannot compute (rope scaling, windows, ...)
            return hf.resolve_checkpoint(ck[0], ck[1], field), ck
    except specmod.SpecError as e:
        raise invalid(str(e))
    except checkpoint.CheckpointError as e:
        msg = str(e)
        raise invalid(msg if msg.startswith(f"{field}.") else f"{field}.checkpoint: {msg}")
    except hf.HfSpecError as e:
        raise invalid(str(e))
    if w.vocab_size not in (0, s["vocabSize"]):
        raise invalid(f"{field}.vocab_size: {w.vocab_size}, but the checkpoint's config.json has vocab_size {s['vocabSize']} (send 0 or that)")
    return s, ck


def load_checkpoint(ck, field="spec.checkpoint", spec=None):
    """θ of a checkpoint directory (version 0 of its model: the seed plays no part, the optimizer starts fresh);
    with `spec`, the directory must still give that spec (a LoRA base named by its directory)."""
    try:
        s, theta = checkpoint.load(ck[0], ck[1])[:2]
    except checkpoint.CheckpointError as e:
        raise invalid(f"{field}: {e}")
    if spec is not None and specmod.spec_key(s) != specmod.spec_key(spec):
        raise invalid(f"{field}: {ck[0]} now gives the spec {specmod.config_json(s)}, the version was made over {specmod.config_json(spec)}")
    return torch.from_numpy(theta)


def info_of(m, v):
    return pb.VersionInfo(model_key=m.key, version=v.number, spec=spec_to_wire(m.spec), weights_sha256=v.weights_sha256,
                          optimizer_sha256=v.optimizer_sha256, param_count=m.model.P, optimizer_step=v.step)


def check_key(key):
    if not key:
        raise invalid("model_key: required")
    if len(key) > MODEL_KEY_LIMIT:
        raise invalid(f"model_key: longer than {MODEL_KEY_LIMIT} characters")
    return key


def check_version(v, field="version"):
    if v >= 2 ** 53:
        raise invalid(f"{field}: must be a non-negative integer below 2^53, got {v}")
    return v


def token_ids(ids, V, field):
    ids = list(ids)
    for i, t in enumerate(ids):
        if t >= V:
            raise invalid(f"{field}[{i}]: token id {t} is outside the vocabulary [0, {V - 1}]")
    return ids


def finite_list(xs, n, field, non_negative=False):
    xs = list(xs)
    if len(xs) != n:
        raise invalid(f"{field}: has {len(xs)} entries, expected {n} (one per token)")
    for i, x in enumerate(xs):
        if not np.isfinite(x):
            raise invalid(f"{field}[{i}]: must be finite, got {js_float(x)}")
        if non_negative and x < 0:
            raise invalid(f"{field}[{i}]: must be >= 0, got {js_float(x)}")
    return xs


def js_float(x):
    if np.isnan(x):
        return "NaN"
    if np.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return specmod.js_number(float(x))


def sequence_issue(s, field, context_len, total):
    if context_len < 1:
        raise invalid(f"{field}.context: needs at least one token (the transformer has no start-of-sequence padding; teams supply a start token)")
    if total > s["maxSeq"]:
        raise invalid(f"{field}: context + tokens = {total} exceeds the model's maxSeq {s['maxSeq']}")


def sampling_of(p, s, field):
    def num(x, ok, rule, name):
        if not ok(x):
            raise invalid(f"{field}.{name}: {rule}, got {js_float(x)}")
        return x
    temperature = num(p.temperature, lambda v: v >= 0 and np.isfinite(v), "must be a finite number >= 0 (0 = greedy)", "temperature")
    top_p = num(p.top_p, lambda v: 0 <= v <= 1, "must be in [0, 1] (0 or 1 = off)", "top_p")
    max_tokens = num(p.max_tokens, lambda v: 1 <= v <= MAX_TOKENS_LIMIT, f"must be an integer in [1, {MAX_TOKENS_LIMIT}]", "max_tokens")
    stops = sorted(set(token_ids(p.stop_tokens, s["vocabSize"], f"{field}.stop_tokens")))
    return {"temperature": float(temperature), "top_k": min(p.top_k, s["vocabSize"]), "top_p": float(top_p), "max_tokens": max_tokens, "stop": set(stops)}


# UpdateSettings' defaults by proto field name (contract.json keys them by the fields' JSON names)
DEFAULTS = {f.name: CONTRACT["updateDefaults"][f.json_name] for f in pb.UpdateSettings.DESCRIPTOR.fields}
KL_TYPES = {1: "k1", 2: "low_var_kl"}  # KlType; 0 (unset) = the default


def settings_of(x):
    def get(name):
        return getattr(x, name) if x is not None and x.HasField(name) else DEFAULTS[name]

    def num(name, ok, rule):
        v = get(name)
        if np.isnan(v) or not ok(v):
            raise invalid(f"settings.{name}: {rule}, got {js_float(v)}")
        return float(v)

    def fnn(v):
        return np.isfinite(v) and v >= 0

    def unit(v):
        return 0 <= v < 1

    max_grad_norm = num("max_grad_norm", fnn, "must be >= 0 (0 = off)")
    dual = num("dual_clip", lambda v: v == 0 or (v > 1 and np.isfinite(v)), "must be > 1 (0 = off)")
    kl_type = x.kl_type if x is not None else 0
    if kl_type not in (0, 1, 2):
        raise invalid(f'settings.kl_type: must be "k1" or "low_var_kl", got {kl_type}')
    inner = get("inner_steps")
    if not (1 <= inner <= INNER_STEPS_LIMIT):
        raise invalid(f"settings.inner_steps: must be an integer in [1, {INNER_STEPS_LIMIT}], got {inner}")
    return {
        "lr": num("lr", fnn, "must be a finite number >= 0"),
        "beta1": num("beta1", unit, "must be in [0, 1)"),
        "beta2": num("beta2", unit, "must be in [0, 1)"),
        "eps": num("eps", lambda v: v > 0 and np.isfinite(v), "must be > 0"),
        "weight_decay": num("weight_decay", fnn, "must be >= 0"),
        "max_grad_norm": max_grad_norm,
        "clip_low": num("clip_low", unit, "must be in [0, 1)"),
        "clip_high": num("clip_high", fnn, "must be >= 0"),
        "dual_clip": float("inf") if dual == 0 else dual,
        "kl_coef": num("kl_coef", fnn, "must be >= 0"),
        "kl_type": KL_TYPES.get(kl_type, DEFAULTS["kl_type"]),
        "entropy_coef": num("entropy_coef", lambda v: np.isfinite(v), "must be a finite number"),
        "inner_steps": inner,
    }


# ---------------------------------------------------------------- the engine

class GenerateCall:
    def __init__(self, model_key, request_id, rows, model=None, theta=None):
        self.model_key = model_key
        self.request_id = request_id
        self.aborted = threading.Event()
        self.rows = rows  # [(context, seed, sampling)]
        self.n = len(rows)
        self.job = None
        self.model, self.theta = model, theta  # the version's runtime (a LoraModel for an adapter) and θ (φ)
        self.adapter = 0  # in a LoRA run, the index of its φ among the run's adapters


class Engine(pbg.EngineServicer):
    def __init__(self, device, requested, fell_back, fallback_reason, threads, memory_bytes=None, max_batch=64):
        self.device = device
        self.max_batch = max_batch
        self.memory_bytes = memory_bytes if memory_bytes is not None else memory.default_budget(device)
        self.requested = requested
        self.fell_back = fell_back
        self.fallback_reason = fallback_reason
        self.threads = threads
        self.started = time.time()
        self.cache = VersionCache(device)
        self.queue = DeviceQueue()
        self.updates = collections.OrderedDict()  # request_id -> (fingerprint, future)
        self.updates_lock = threading.Lock()
        self.calls = set()
        self.calls_lock = threading.Lock()
        self.counters = collections.Counter()
        self.generate_s = 0.0
        self.faults = faultsmod.parse_faults(None)
        self.micro_batch_bytes = DEFAULT_MICRO_BATCH_BYTES
        self.checkpoint_layers = False
        self.parallel = None  # parallel.DataParallel with several devices

    # -- plumbing
    def _run(self, context, fn):
        try:
            return fn()
        except Fault as f:
            fault = f
        except Exception as e:  # noqa: BLE001
            log("internal_error", error=repr(e), trace=traceback.format_exc())
            fault = Fault("INTERNAL", f"internal engine error: {e}")
        self._abort(context, fault)

    def _abort(self, context, f):
        context.set_trailing_metadata((("troupe-error-reason", f.reason),))
        context.abort(REASON_CODE[f.reason], f.message)

    def _device(self, fn, kind="run"):
        job = self.queue.submit(fn, kind)
        return job.future.result()

    def _check_memory(self, s):
        """A spec whose smallest run cannot fit in the memory budget is refused before anything is allocated."""
        try:
            memory.check_fits(s, self.memory_bytes)
        except memory.SpecTooLarge as e:
            raise invalid(str(e))

    def _hf_checkpoint(self, s, d):
        try:
            return hf.load_checkpoint(d, self.cache.runtime(s))
        except hf.HfSpecError as e:
            raise invalid(f"spec.checkpoint: {e}")

    # -- versions
    def InitModel(self, req, context):
        def go():
            key = check_key(req.model_key)
            s, ck = spec_from_wire(req.spec if req.HasField("spec") else None)
            self._check_memory(s)
            # read before the model exists here: a bad directory changes nothing
            pretrained = (self._hf_checkpoint(s, ck[0]) if hf.is_hf(s) else load_checkpoint(ck)) if ck else None

            def work(job):
                m = self.cache.ensure_model(key, s)
                if pretrained is not None:
                    theta = pretrained
                elif "lora" in s:
                    theta = init_adapter(s, int(req.seed))
                else:
                    theta = self.cache.seeded(s, int(req.seed))

                def z():
                    return torch.zeros(theta.numel())

                return info_of(m, self.cache.put(m, 0, theta.to(self.device), z().to(self.device), z().to(self.device), 0))
            return self._device(work)
        return self._run(context, go)

    def _load(self, req, weights=None, optim=None):
        key = check_key(req.model_key)
        number = check_version(req.version)
        s = spec_from_wire(req.spec if req.HasField("spec") else None)[0]
        self._check_memory(s)
        if req.HasField("weights_ref") and req.weights_ref.uri:
            weights = read_reference(req.weights_ref, "weights_ref")
        elif weights is None:
            weights = req.weights
        if req.HasField("optimizer_state_ref") and req.optimizer_state_ref.uri:
            optim = read_reference(req.optimizer_state_ref, "optimizer_state_ref")
        elif optim is None:
            optim = req.optimizer_state
        if req.weights_sha256 and sha256_hex(weights) != req.weights_sha256.lower():
            raise invalid(f"weights_sha256: the weights bytes hash to {sha256_hex(weights)}, not {req.weights_sha256}")
        P = s["params"] if hf.is_hf(s) else specmod.adapter_layout(s)[1] if "lora" in s else specmod.param_layout(s)[1]
        theta = decode_weights(weights, P)
        step, m, v = decode_optimizer(optim, P)

        def work(job):
            entry = self.cache.ensure_model(key, s)
            return info_of(entry, self.cache.put(entry, number, theta.to(self.device), m.to(self.device), v.to(self.device), step))
        return self._device(work)

    def LoadVersion(self, req, context):
        return self._run(context, lambda: self._load(req))

    def LoadVersionChunks(self, request_iterator, context):
        def go():
            header = None
            w, o = [], []
            for i, c in enumerate(request_iterator):
                if i == 0:
                    if not c.HasField("header"):
                        raise invalid("header: the first LoadVersionChunk must carry the request header")
                    header = c.header
                w.append(c.weights)
                o.append(c.optimizer_state)
            if header is None:
                raise invalid("header: the first LoadVersionChunk must carry the request header")
            return self._load(header, header.weights + b"".join(w), header.optimizer_state + b"".join(o))
        return self._run(context, go)

    def _export(self, req):
        m, v = self.cache.version(check_key(req.model_key), check_version(req.version))
        return m, v, encode_weights(v.theta), encode_optimizer(v.step, v.m, v.v)

    def ExportVersion(self, req, context):
        def go():
            m, v, w, o = self._export(req)
            if not req.destination_uri:
                return pb.ExportVersionResponse(info=info_of(m, v), weights=w, optimizer_state=o)
            try:
                d = path_of_uri(req.destination_uri, "destination_uri")
            except ValueError as e:
                raise Fault("REFERENCE_UNREADABLE", str(e))
            try:
                os.makedirs(d, exist_ok=True)  # the proto: created if missing
            except OSError as e:
                raise Fault("REFERENCE_UNREADABLE", f"destination_uri: cannot create {d} ({e.strerror})")
            if not os.path.isdir(d) or not os.access(d, os.W_OK):
                raise Fault("REFERENCE_UNREADABLE", f"destination_uri: {d} is not a directory this engine can write")
            refs = []
            for data, suffix in ((w, "weights"), (o, "optim")):
                sha = sha256_hex(data)
                name = os.path.join(d, f"{sha}.{suffix}")
                tmp = None
                try:
                    fd, tmp = tempfile.mkstemp(prefix=f".{sha[:16]}.", suffix=".tmp", dir=d)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    os.chmod(tmp, 0o644)
                    os.rename(tmp, name)  # complete before it is named
                except OSError as e:
                    if tmp and os.path.exists(tmp):
                        os.unlink(tmp)
                    raise Fault("REFERENCE_UNREADABLE", f"destination_uri: cannot write {name} ({e.strerror})")
                refs.append(pb.BlobReference(uri="file://" + urllib.parse.quote(name), size=len(data), sha256=sha))
            return pb.ExportVersionResponse(info=info_of(m, v), weights_ref=refs[0], optimizer_state_ref=refs[1])
        return self._run(context, go)

    def ExportVersionChunks(self, req, context):
        try:
            if req.destination_uri:
                raise invalid("destination_uri: export by reference is for the unary ExportVersion only")
            m, v, w, o = self._export(req)
        except Fault as f:
            self._abort(context, f)
        first = True
        for at in range(0, max(len(w), 1), CHUNK_BYTES):
            yield pb.ExportVersionChunk(info=info_of(m, v) if first else None, weights=w[at:at + CHUNK_BYTES])
            first = False
        for at in range(0, len(o), CHUNK_BYTES):
            yield pb.ExportVersionChunk(optimizer_state=o[at:at + CHUNK_BYTES])

    # -- generate / score
    def _shape(self, model):
        """(cache slots, most rows a step) of a Score or Generate run (memory.run_slots, memory.step_rows)."""
        slots = memory.run_slots(model.spec, self.memory_bytes, self.max_batch)
        return slots, memory.step_rows(model.spec, self.memory_bytes, slots)

    def _run_rows(self, model, W, cache, max_step, rows, on_rows):
        """run_rows over `rows` [(token, position, slot)] → on_rows(logits, log-softmax, first row, real rows) per
        step, both [step rows, V] (row-wise and element-wise ops on a whole step: a multiple of 16 rows, so an element's
        bits do not depend on how many rows are real)."""
        def on_block(logits, a, m):
            on_rows(logits, torch.log_softmax(logits, dim=-1), a, m)
            self.queue.progress()  # each step is a device run (the hang watchdog sees progress)
        with torch.no_grad():
            model.run_rows(W, cache, rows, on_block, max_step)

    def _score_many(self, model, W, items):
        """[(context, tokens)] → [(log π(tokens[t]), entropies)]: each sequence's rows 0..S-2 in a cache slot of its own,
        as many sequences at a time as there are slots, packed into run_rows steps (a row's bits do not depend on
        what runs beside it, and are those of Generate's row at the same position)."""
        R, max_step = self._shape(model)
        cache = None
        results = [([], []) for _ in items]
        todo = [i for i, (_, toks) in enumerate(items) if len(toks) > 0]
        for w in range(0, len(todo), R):
            wave = todo[w:w + R]
            if cache is None:
                cache = model.new_cache(R)
            else:  # no keys of an earlier sequence stay in a slot
                for k, v in cache:
                    k.zero_()
                    v.zero_()
            rows, targets = [], []
            for r, i in enumerate(wave):
                full = list(items[i][0]) + list(items[i][1])
                rows += [(t, p, r) for p, t in enumerate(full[:-1])]
                targets += full[1:]
            tgt = torch.tensor(targets, dtype=torch.long, device=self.device)
            lp = torch.zeros(len(rows), device=self.device)
            ent = torch.zeros(len(rows), device=self.device)

            def on_rows(logits, logp, a, m):
                lp[a:a + m] = logp[:m].gather(1, tgt[a:a + m, None])[:, 0]
                ent[a:a + m] = -(torch.exp(logp) * logp).sum(dim=-1)[:m]
            self._run_rows(model, W, cache, max_step, rows, on_rows)
            lp, ent = lp.cpu().tolist(), ent.cpu().tolist()
            at = 0
            for i in wave:
                C, T = len(items[i][0]), len(items[i][1])
                results[i] = (lp[at + C - 1:at + C - 1 + T], ent[at + C - 1:at + C - 1 + T])
                at += C + T - 1
        return results

    def _batch_version(self, req):
        """The model and version a Generate or Score request names, and that it has sequences."""
        key = check_key(req.model_key)
        number = check_version(req.version)
        if len(req.sequences) == 0:
            raise invalid("sequences: empty batch (send at least one sequence)")
        return self.cache.version(key, number)

    def Generate(self, req, context):
        def go():
            m, v = self._batch_version(req)
            s = m.spec
            shared = sampling_of(req.sampling, s, "sampling") if req.HasField("sampling") else None
            rows = []
            for i, q in enumerate(req.sequences):
                own = sampling_of(q.sampling, s, f"sequences[{i}].sampling") if q.HasField("sampling") else shared
                if own is None:
                    raise invalid(f"sampling: required (at least max_tokens), or sequences[{i}].sampling")
                ctx = token_ids(q.context, s["vocabSize"], f"sequences[{i}].context")
                sequence_issue(s, f"sequences[{i}]", len(ctx), len(ctx) + own["max_tokens"])
                rows.append((ctx, int(q.seed), own))
            call = GenerateCall(m.key, req.request_id, rows, m.model, v.theta)

            def work(job):
                t0 = time.monotonic()
                calls = [job.call] + [j.call for j in job.merged]
                model = calls[0].model
                if isinstance(model, LoraModel):  # adapters over one base: each call's rows with its φ, unmerged
                    phis, index = [], {}
                    for c in calls:
                        c.adapter = index.setdefault(id(c.theta), len(phis))
                        if c.adapter == len(phis):
                            phis.append(c.theta)
                    W = model.adapters(phis)
                    if len(phis) > 1:
                        self.counters["mixed_adapter_runs"] += 1
                else:
                    W = model.weights(calls[0].theta, inference=True)
                results = self._generate_batch(model, W, calls)
                for j, out in zip(job.merged, results[1:]):
                    if not j.future.done():
                        j.future.set_result(out)
                self.generate_s += time.monotonic() - t0
                self.counters["generate_batches"] += 1
                self.counters["generate_rows"] += sum(c.n for c in calls)
                self.counters["generate_requests"] += len(calls)
                self.counters["tokens_generated"] += sum(len(r.tokens) for out in results for r in out)
                return results[0]

            with self.calls_lock:
                # a LoRA version shares runs with every adapter of its spec over the same base θ (one tensor per base,
                # VersionCache.shared_base, alive while these jobs hold it), other versions with their own calls only
                merge = ("lora", specmod.spec_key(s), id(m.model.base)) if isinstance(m.model, LoraModel) else (m.key, v.number, id(m))
                call.job = self.queue.submit(work, "generate", merge_key=merge)
                call.job.call = call
                self.calls.add(call)
            try:
                seqs = call.job.future.result()
            finally:
                with self.calls_lock:
                    self.calls.discard(call)
            for r in seqs:
                r.version = v.number
            return pb.GenerateResponse(version=v.number, sequences=seqs)
        return self._run(context, go)

    def _generate_batch(self, model, W, calls):
        """Every sequence of `calls` (one model version, or LoRA adapters over one base: W from LoraModel.adapters, each
        call's `adapter` its φ's index), continuously batched over the cache slots (max_batch, fewer
        when memory is short): each round runs, in run_rows steps, one row per running sequence (its last token)
        and the context rows of the sequences that take the free slots, then draws the next token of each of them from
        its row's logits (sampling.sample_rows, Philox noise per sequence and token). A row's bits do not depend on the
        other rows (nor on their adapters), so a sequence's tokens do not depend on what runs beside it, and its log-probs
        (the log-softmax of the rows that drew its tokens) are Score's bit for bit."""
        out = [[None] * c.n for c in calls]
        pending = collections.deque((c, i) for c in calls for i in range(c.n))
        R, max_step = self._shape(model)
        slots = [None] * R
        cache = None
        adapters = W.get(LORA)
        if adapters is not None:  # each cache slot's adapter: its sequence's call's
            adapters.slots = [0] * R

        def finish(r, reason):
            st = slots[r]
            out[calls.index(st["call"])][st["i"]] = pb.GeneratedSequence(tokens=st["tokens"], logprobs=st["lps"],
                                                                         sample_logprobs=st["slps"], stop_reason=reason)
            slots[r] = None

        with torch.no_grad():
            while True:
                for r, st in enumerate(slots):  # Abort: the running sequences stop after their current token
                    if st is not None and st["call"].aborted.is_set():
                        finish(r, pb.ABORTED)
                rows, draws = [], []  # draws: (row, slot) whose row's logits give the slot's next token
                for r, st in enumerate(slots):
                    if st is not None:
                        rows.append((st["tokens"][-1], len(st["ctx"]) + len(st["tokens"]) - 1, r))
                        draws.append((len(rows) - 1, r))
                fresh = []
                for r in range(R):
                    while slots[r] is None and pending:
                        c, i = pending.popleft()
                        if c.aborted.is_set():
                            out[calls.index(c)][i] = pb.GeneratedSequence(stop_reason=pb.ABORTED)
                            continue
                        ctx, seed, sp = c.rows[i]
                        if adapters is not None:
                            adapters.slots[r] = c.adapter
                        slots[r] = {"call": c, "i": i, "ctx": ctx, "sp": sp, "tokens": [], "slps": [], "lps": [],
                                    "u": philox.uniforms(seed, philox.STREAM_SAMPLING, sp["max_tokens"]).astype(np.float32)}
                        rows += [(t, p, r) for p, t in enumerate(ctx)]
                        draws.append((len(rows) - 1, r))
                        fresh.append(r)
                if not rows:
                    break
                if cache is None:
                    cache = model.new_cache(R)
                elif fresh:  # no keys of an earlier sequence stay in a slot
                    idx = torch.tensor(fresh, device=self.device)
                    for k, v in cache:
                        k.index_fill_(0, idx, 0)
                        v.index_fill_(0, idx, 0)
                at = [row for row, _ in draws]  # increasing
                logits = torch.zeros(len(draws), model.spec["vocabSize"], device=self.device)
                logp = torch.zeros_like(logits)

                def on_rows(lg, lp, a, m):
                    n0, n1 = bisect.bisect_left(at, a), bisect.bisect_left(at, a + m)
                    idx = torch.tensor(at[n0:n1], device=self.device) - a
                    logits[n0:n1], logp[n0:n1] = lg[idx], lp[idx]
                self._run_rows(model, W, cache, max_step, rows, on_rows)
                self._draw(logits, logp, [slots[r] for _, r in draws])
                for _, r in draws:
                    st, sp = slots[r], slots[r]["sp"]
                    if st["tokens"][-1] in sp["stop"]:
                        finish(r, pb.STOP_TOKEN)
                    elif len(st["tokens"]) >= sp["max_tokens"]:
                        finish(r, pb.MAX_TOKENS)
        return out

    def _draw(self, logits, logp, states):
        """Append the next token, its sample log-prob and its log-prob to each sequence state: sample_rows per setting."""
        groups = collections.defaultdict(list)
        for n, st in enumerate(states):
            sp = st["sp"]
            groups[(sp["temperature"], sp["top_k"], sp["top_p"])].append(n)
        for (temperature, top_k, top_p), ns in groups.items():
            idx = torch.tensor(ns, device=logits.device)
            u = torch.tensor([states[n]["u"][len(states[n]["tokens"])] for n in ns], dtype=torch.float32, device=logits.device)
            tok, slp = sample_rows(logits[idx], u, temperature, top_k, top_p)
            lp = logp[idx].gather(1, tok[:, None])[:, 0]
            for n, t, s, p in zip(ns, tok.cpu().tolist(), slp.cpu().tolist(), lp.cpu().tolist()):
                states[n]["tokens"].append(t)
                states[n]["slps"].append(s)
                states[n]["lps"].append(p)

    def Abort(self, req, context):
        def go():
            ids = set(req.request_ids)
            n = 0
            with self.calls_lock:
                for c in list(self.calls):
                    if req.model_key and c.model_key != req.model_key:
                        continue
                    if ids and c.request_id not in ids:
                        continue
                    if c.job.future.done() or c.aborted.is_set():  # returned already, or aborted by an earlier Abort
                        continue
                    c.aborted.set()
                    n += 1
                    if not c.job.started:  # still queued: comes back now, every sequence ABORTED with no tokens
                        res = [pb.GeneratedSequence(stop_reason=pb.ABORTED) for _ in range(c.n)]
                        with self.queue.cv:
                            if not c.job.started:
                                c.job.future.set_result(res)
            return pb.AbortResponse(aborted_requests=n)
        return self._run(context, go)

    def Score(self, req, context):
        def go():
            m, v = self._batch_version(req)
            s = m.spec
            seqs = []
            for i, q in enumerate(req.sequences):
                ctx = token_ids(q.context, s["vocabSize"], f"sequences[{i}].context")
                toks = token_ids(q.tokens, s["vocabSize"], f"sequences[{i}].tokens")
                sequence_issue(s, f"sequences[{i}]", len(ctx), len(ctx) + len(toks))
                seqs.append((ctx, toks))
            theta = v.theta

            def work(job):
                W = m.model.weights(theta, inference=True)
                out = [pb.ScoredSequence(logprobs=lp, entropy=ent) for lp, ent in self._score_many(m.model, W, seqs)]
                self.counters["score_runs"] += 1
                return out
            return pb.ScoreResponse(version=v.number, sequences=self._device(work))
        return self._run(context, go)

    # -- update
    def _start_update(self, req, arrived, progress):
        """(future, replayed) of an update; raises Fault for requests that fail validation."""
        key = check_key(req.model_key)
        base = check_version(req.base_version, "base_version")
        rid = req.request_id
        if not rid:
            raise invalid("request_id: required (the idempotency key of this update)")
        if len(rid) > REQUEST_ID_LIMIT:
            raise invalid(f"request_id: longer than {REQUEST_ID_LIMIT} characters")
        fp_req = pb.UpdateRequest()
        fp_req.CopyFrom(req)
        fp_req.request_id = ""
        fingerprint = hashlib.sha256(fp_req.SerializeToString(deterministic=True)).hexdigest()
        with self.updates_lock:
            prev = self.updates.get(rid)
            if prev is not None:
                if prev[0] != fingerprint:
                    raise Fault("REQUEST_ID_REUSED", f'request_id "{rid}" was already used for a different update request')
                return prev[1], True
            m, _ = self.cache.version(key, base)
            s = m.spec
            if len(req.samples) == 0:
                raise invalid("samples: empty batch (send at least one sample)")
            samples = []
            trained = 0
            for i, x in enumerate(req.samples):
                f = f"samples[{i}]"
                toks = token_ids(x.tokens, s["vocabSize"], f"{f}.tokens")
                n = len(toks)
                mask = finite_list(x.loss_mask, n, f"{f}.loss_mask")
                for t, mm in enumerate(mask):
                    if mm not in (0, 1):
                        raise invalid(f"{f}.loss_mask[{t}]: must be 0 or 1, got {mm}")
                    trained += mm
                ctx = token_ids(x.context, s["vocabSize"], f"{f}.context")
                sequence_issue(s, f, len(ctx), len(ctx) + n)
                samples.append({
                    "context": ctx, "tokens": toks, "loss_mask": mask,
                    "advantages": finite_list(x.advantages, n, f"{f}.advantages"),
                    "old_logprobs": finite_list(x.old_logprobs, n, f"{f}.old_logprobs"),
                    "loss_weights": finite_list(x.loss_weights, n, f"{f}.loss_weights", non_negative=True),
                    "ref_logprobs": [] if len(x.ref_logprobs) == 0 else finite_list(x.ref_logprobs, n, f"{f}.ref_logprobs"),
                })
            if trained == 0:
                raise invalid("samples: no trained tokens (every loss_mask is 0)")
            st = settings_of(req.settings if req.HasField("settings") else None)
            self._check_base(m, base, req.allow_stale_base)

            def work(job):
                t0 = time.monotonic()
                mm, v = self.cache.version(key, base)
                self._check_base(mm, base, req.allow_stale_base)
                progress["phase"] = "scoring"
                W = mm.model.weights(v.theta, inference=True)
                gaps = []
                for x, (lp, _) in zip(samples, self._score_many(mm.model, W, [(x["context"], x["tokens"]) for x in samples])):
                    gaps += [abs(x["old_logprobs"][t] - lp[t]) for t in range(len(lp)) if x["loss_mask"][t] == 1]
                progress["phase"] = "training"

                def on_step(k):
                    progress["inner_step"] = k
                    self.queue.progress()
                try:
                    theta, mo, ve, step, steps, ntok = run_update(mm.model, v.theta, v.m, v.v, v.step, samples, st, on_step,
                                                                  # a LoRA update runs here alone: the other ranks build full models
                                                                  self.micro_batch_bytes, self.checkpoint_layers, None if "lora" in mm.spec else self.parallel)
                except NonFiniteUpdate as e:
                    raise Fault(
                        "NON_FINITE_UPDATE",
                        f'update of "{key}" from version {base} produced non-finite values at {e} '
                        f"(loss={js_float(e.loss)}, grad_norm={js_float(e.grad_norm)}); nothing was committed",
                    )
                finally:
                    self.counters["update_runs"] += 1
                if self.faults.hold_update(rid):
                    log("fault_hold_update", request_id=rid, seconds=faultsmod.HOLD_UPDATE_S)
                    time.sleep(faultsmod.HOLD_UPDATE_S)
                with self.cache.lock:
                    nv = self.cache.put(mm, mm.latest + 1, theta, mo, ve, step)
                metrics = [pb.UpdateMetrics(**x) for x in steps]
                mean = {k: sum(x[k] for x in steps) / len(steps) for k in steps[0]}
                return pb.UpdateResponse(
                    info=info_of(mm, nv), base_version=base, metrics=pb.UpdateMetrics(**mean), step_metrics=metrics,
                    tokens=ntok, samples=len(samples), replayed=False, duration_ms=(time.monotonic() - t0) * 1000,
                    logprob_gap_mean=(sum(gaps) / len(gaps)) if gaps else 0.0, logprob_gap_max=max(gaps) if gaps else 0.0)

            job = self.queue.submit(work, "update")
            progress["job"] = job
            self.updates[rid] = (fingerprint, job.future)
            while len(self.updates) > MAX_REMEMBERED_UPDATES:
                self.updates.popitem(last=False)

            def forget(fut):
                if fut.exception() is not None:
                    with self.updates_lock:
                        if self.updates.get(rid, (None, None))[1] is fut:
                            del self.updates[rid]
            job.future.add_done_callback(forget)
            return job.future, False

    def _check_base(self, m, base, allow_stale):
        if base < m.latest and not allow_stale:
            raise Fault("STALE_BASE", f'base_version {base} of "{m.key}" is not the latest version ({m.latest}); set allow_stale_base to train from it anyway')

    def _result(self, fut, replayed):
        res = fut.result()
        if replayed:
            out = pb.UpdateResponse()
            out.CopyFrom(res)
            out.replayed = True
            return out
        return res

    def Update(self, req, context):
        def go():
            fut, replayed = self._start_update(req, time.monotonic(), {"phase": "queued", "inner_step": 0})
            return self._result(fut, replayed)
        return self._run(context, go)

    def UpdateStream(self, req, context):
        arrived = time.monotonic()
        progress = {"phase": "queued", "inner_step": 0}
        inner = req.settings.inner_steps if req.HasField("settings") and req.settings.HasField("inner_steps") else 1

        def event():
            job = progress.get("job")
            pos = self.queue.position(job) if job is not None and not job.started else 0
            return pb.UpdateEvent(progress=pb.UpdateProgress(
                phase=progress["phase"] if job is None or job.started else "queued", queue_position=pos,
                inner_step=progress["inner_step"], inner_steps=inner, micro_batches=1, elapsed_ms=(time.monotonic() - arrived) * 1000))
        try:
            fut, replayed = self._start_update(req, arrived, progress)
        except Fault as f:
            self._abort(context, f)
        yield event()
        while True:
            try:
                fut.result(timeout=PROGRESS_EVERY_S)
                break
            except futures.TimeoutError:
                yield event()
            except Exception:  # noqa: BLE001
                break
        try:
            res = self._result(fut, replayed)
        except Fault as f:
            self._abort(context, f)
        except Exception as e:  # noqa: BLE001
            log("internal_error", error=repr(e), trace=traceback.format_exc())
            self._abort(context, Fault("INTERNAL", f"internal engine error: {e}"))
        yield pb.UpdateEvent(result=res)

    # -- health / stats
    def capabilities(self):
        return pb.Capabilities(
            protocol_version=PROTOCOL_VERSION, engine=ENGINE_NAME, rpcs=RPCS,
            families=["transformer"], deterministic=True, score_matches_generate="bit-identical", score_tolerance=0.0,
            max_batch=self.max_batch, weights_by_reference=True, lora=True)

    def Health(self, req, context):
        return pb.HealthResponse(
            status="SERVING", device=self.device, requested_device=self.requested, fell_back=self.fell_back,
            fallback_reason=self.fallback_reason, uptime_s=time.time() - self.started, device_runs=self.queue.completed,
            queue_depth=self.queue.depth, capabilities=self.capabilities())

    def Stats(self, req, context):
        c = self.counters
        with self.cache.lock:
            models = [pb.ModelStats(model_key=m.key, spec=spec_to_wire(m.spec), versions=sorted(m.versions), latest_version=max(m.latest, 0))
                      for m in self.cache.models.values()]
        b = c["generate_batches"]
        return pb.StatsResponse(
            device=self.device, requested_device=self.requested, fell_back=self.fell_back, fallback_reason=self.fallback_reason,
            models=models, queue_depth=self.queue.depth,
            tokens_per_second=(c["tokens_generated"] / self.generate_s) if self.generate_s > 0 else 0.0,
            tokens_generated=c["tokens_generated"], generate_batches=b,
            mean_batch_size=(c["generate_rows"] / b) if b else 0.0, mean_requests_per_batch=(c["generate_requests"] / b) if b else 0.0,
            score_runs=c["score_runs"], update_runs=c["update_runs"], intra_op_threads=self.threads, batch_window_ms=0.0, max_batch=self.max_batch,
            batch_invariance=BATCH_INVARIANCE,
            uptime_s=time.time() - self.started, mixed_adapter_runs=c["mixed_adapter_runs"])


# ---------------------------------------------------------------- main

def resolve_device(requested):
    if requested == "cpu":
        return "cpu", False, ""
    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda:0", False, ""
        return "cpu", True, "auto: torch.cuda.is_available() is false (no CUDA device or torch built without CUDA)"
    idx = int(requested[5:]) if requested.startswith("cuda:") else 0
    if not torch.cuda.is_available():
        fail_start(f"--device {requested}: CUDA is not available to torch {torch.__version__} (torch.cuda.is_available() is false)")
    if idx >= torch.cuda.device_count():
        fail_start(f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s)")
    return f"cuda:{idx}", False, ""


def main():
    a = ARGS
    # as the built-in engine (processes/onnx-engine.ts): 90% of what is free at start-up unless told
    watchdog.watch(a.rss_limit_bytes if a.rss_limit_bytes is not None else int(0.9 * watchdog.free_memory_bytes()))
    device, fell_back, reason = resolve_device(a.device)
    if a.dtype != "fp32" and not device.startswith("cuda"):
        # torch 1.13's CPU bf16 matmuls are emulated (slower than fp32 here) and no CPU bf16 path is tested: fp32 only
        fail_start(f"bad flag: --dtype {a.dtype} needs a CUDA device (--device cuda:N); on {device} the engine computes in fp32 only")
    threads = a.threads or 1
    torch.set_num_threads(threads)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # noqa: BLE001
        pass
    if fell_back:
        log("device_fallback", requested=a.device, device=device, reason=reason)
    engine = Engine(device, ",".join(a.devices), fell_back, reason, threads, a.memory_bytes, a.max_batch)
    engine.micro_batch_bytes = a.micro_batch_bytes
    if len(a.devices) > 1:
        for d in a.devices[1:]:
            resolve_device(d)
        import parallel
        engine.parallel = parallel.DataParallel(a.devices, threads, a.dtype)
        log("data_parallel", devices=a.devices, world_size=len(a.devices))
    engine.checkpoint_layers = a.activation_checkpointing
    if a.dtype == "bf16":
        engine.queue.autocast = torch.bfloat16
    try:
        engine.faults = faultsmod.parse_faults(os.environ.get("TROUPE_ENGINE_FAULTS"))
    except ValueError as e:
        fail_start(str(e))
    if engine.faults.armed:
        log("faults_armed", faults=engine.faults.armed)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0)])
    pbg.add_EngineServicer_to_server(engine, server)
    host = a.host
    target = f"[{host}]:{a.port}" if ":" in host and not host.startswith("[") else f"{host}:{a.port}"
    if a.port != 0:  # a clean one-line error for a taken port (gRPC core would log its own first)
        import errno
        import socket
        probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), a.port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                fail_start(f"port {a.port} on {host} is already in use")
        finally:
            probe.close()
    try:
        port = server.add_insecure_port(target)
    except RuntimeError:
        port = 0
    if port == 0:
        fail_start(f"cannot listen on {target}: port {a.port} on {host} is already in use (or the address is not available)")
    server.start()
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    sys.stdout.write(json.dumps({"event": "listening", "port": port, "address": address, "device": device, "fell_back": fell_back,
                                 "fallback_reason": reason, "pid": os.getpid()}, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    log("engine_started", engine=ENGINE_NAME, address=address, device=device, threads=threads,
        memory_bytes=engine.memory_bytes)
    if a.exit_with_stdin:
        def watch():
            try:
                while sys.stdin.buffer.read(65536):
                    pass
            except Exception:  # noqa: BLE001
                pass
            log("stdin_closed", message="parent went away; exiting")
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(1)


if __name__ == "__main__":
    main()
