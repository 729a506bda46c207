"""A model's versions on this engine: their bytes (engines/protocol/version-bytes.ts's formats, file:// references) and
the cache of versions per model key (engines/onnx/version-cache.ts's rules)."""
import hashlib
import json
import os
import threading
import urllib.parse
import weakref

import numpy as np
import torch

import hf
import spec as specmod
from lora import LoraModel
from init import init_weights
from contract import Fault, MAX_VERSIONS_PER_MODEL, invalid
from messages import load_checkpoint


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
                                     lambda: load_checkpoint((d, base["maxSeq"]), "spec.lora.baseCheckpoint", base, self.runtime(base)))
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
