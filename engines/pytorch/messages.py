"""Requests and replies: specs to and from the wire, and the checks of every request field, each failure an
INVALID_REQUEST naming the field."""
import json

import numpy as np
import torch

import engine_pb2 as pb
import checkpoint
import hf
import spec as specmod
from contract import CONTRACT, INNER_STEPS_LIMIT, MAX_TOKENS_LIMIT, MODEL_KEY_LIMIT, invalid


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
        shape = {"hf": base["hf"], "maxSeq": base["maxSeq"]} if hf.is_hf(base) else json.loads(specmod.config_json(base))
        config = {**shape, "lora": {**lora, "baseCheckpoint": ck[0]}}
        w = pb.ModelSpec(family=w.family, vocab_size=base["vocabSize"])
    try:
        if w.family == specmod.FAMILY and "hf" in config:  # a transformers spec, as VersionInfo gives it back
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


def load_checkpoint(ck, field="spec.checkpoint", spec=None, runtime=None):
    """θ of a checkpoint directory (version 0 of its model: the seed plays no part, the optimizer starts fresh);
    with `spec`, the directory must still give that spec (a LoRA base named by its directory); a transformers spec's
    (spec.hf) is read for its `runtime`."""
    if spec is not None and hf.is_hf(spec):
        try:
            s = hf.resolve_checkpoint(ck[0], ck[1])
            if specmod.spec_key(s) != specmod.spec_key(spec):
                raise invalid(f"{field}: {ck[0]} now gives the spec {specmod.config_json(s)}, the version was made over {specmod.config_json(spec)}")
            return hf.load_checkpoint(ck[0], runtime)
        except hf.HfSpecError as e:
            raise invalid(f"{field}: {e}")
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
