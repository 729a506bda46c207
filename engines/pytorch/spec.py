"""The "transformer" family's config: normalization (defaults, limits, messages
by field path) and the flat parameter layout, mirroring engines/families/transformer/spec.ts
field for field, so that a spec and a weights vector mean the same in both engines.
"""
import json
import math

FAMILY = "transformer"
POSITIONS = ["learned", "rope"]
NORMS = ["layernorm", "rmsnorm"]
MLPS = ["gelu", "swiglu"]
LIMITS = {
    "vocabSize": 262_144,
    "width": 8192,
    "layers": 128,
    "heads": 256,
    "headDim": 1024,
    "mlpWidth": 65_536,
    "maxSeq": 32_768,
    "params": 10_000_000_000,  # a typo's bound: whether a spec fits is memory.py's check (spec.ts TRANSFORMER_LIMITS)
    "loraRank": 4096,
}
# LoRA target names: one layer's linear maps by their slot names (spec.ts LORA_TARGETS)
LORA_TARGETS = ["q", "k", "v", "o", "1", "2", "g", "u", "d"]
MAX_SAFE_INTEGER = 2 ** 53 - 1
# normalized field order (the order spec.ts's zod schema declares them)
FIELDS = ["width", "layers", "heads", "kvHeads", "headDim", "mlpWidth", "positions", "ropeTheta", "norm", "normEps", "qkNorm", "mlp", "bias",
          "tiedHead", "maxSeq"]


_ABSENT = object()


class SpecError(Exception):
    def __init__(self, issues):
        self.issues = issues
        super().__init__("; ".join(f"{p}: {m}" for p, m in issues))


def _type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _checks(at):
    """The field checks of a config, each reporting by at(field, message): count, one_of, boolean, number."""
    def count(name, value, maximum, minimum=1, default=None, optional=False):
        if value is _ABSENT:
            if optional:
                return None
            if default is None:
                at(name, "Invalid input: expected number, received undefined")
                return None
            return default
        if not _is_number(value):
            at(name, f"Invalid input: expected number, received {_type_name(value)}")
            return None
        if float(value) != math.floor(value):
            at(name, "must be an integer")
            return None
        v = int(value)
        if v < minimum:
            at(name, f"must be ≥ {minimum}")
            return None
        if v > maximum:
            at(name, f"must be ≤ {maximum}")
            return None
        return v

    def one_of(name, value, options, default):
        if value is _ABSENT:
            return default
        if not isinstance(value, str) or value not in options:
            at(name, f"unknown option {json.dumps(value)}; known: {', '.join(options)}")
            return None
        return value

    def boolean(name, value, default):
        if value is _ABSENT:
            return default
        if not isinstance(value, bool):
            at(name, f"Invalid input: expected boolean, received {_type_name(value)}")
            return None
        return value

    def number(name, value, default, check):
        if value is _ABSENT:
            return default
        if not _is_number(value):
            at(name, f"Invalid input: expected number, received {_type_name(value)}")
            return None
        msg = check(value)
        if msg:
            at(name, msg)
            return None
        return float(value)

    return count, one_of, boolean, number


def normalize(family: str, vocab_size: int, config: dict, prefix="spec"):
    """The normalized spec dict {family, vocabSize, width, ...}; raises SpecError (every issue by path)."""
    issues = []

    def at(f, m):
        issues.append((f"{prefix}.{f}", m))

    if family != FAMILY:
        raise SpecError([(f"{prefix}.family", f"unknown model family {json.dumps(family)} (this engine hosts: {FAMILY})")])
    if not isinstance(config, dict):
        raise SpecError([(f"{prefix}.config_json", "must be a JSON object")])
    cfg = {k: v for k, v in config.items() if k not in ("family", "vocabSize")}
    out = {}

    count, one_of, boolean, number = _checks(at)

    def g(k):
        return cfg.get(k, _ABSENT)

    vocab = count("vocabSize", vocab_size, LIMITS["vocabSize"], 2)
    out["width"] = count("width", g("width"), LIMITS["width"], default=128)
    out["layers"] = count("layers", g("layers"), LIMITS["layers"], default=2)
    out["heads"] = count("heads", g("heads"), LIMITS["heads"], default=4)
    out["kvHeads"] = count("kvHeads", g("kvHeads"), LIMITS["heads"], optional=True)
    out["headDim"] = count("headDim", g("headDim"), LIMITS["headDim"], optional=True)
    out["mlpWidth"] = count("mlpWidth", g("mlpWidth"), LIMITS["mlpWidth"], optional=True)
    out["positions"] = one_of("positions", g("positions"), POSITIONS, "learned")
    out["ropeTheta"] = number("ropeTheta", g("ropeTheta"), 10_000.0, lambda v: None if v > 1 else "must be > 1")
    out["norm"] = one_of("norm", g("norm"), NORMS, "layernorm")
    out["normEps"] = number("normEps", g("normEps"), 1e-5, lambda v: "must be > 0" if not v > 0 else ("must be ≤ 1" if v > 1 else None))
    out["qkNorm"] = boolean("qkNorm", g("qkNorm"), False)
    out["mlp"] = one_of("mlp", g("mlp"), MLPS, "gelu")
    out["bias"] = boolean("bias", g("bias"), True)
    out["tiedHead"] = boolean("tiedHead", g("tiedHead"), True)
    out["maxSeq"] = count("maxSeq", g("maxSeq"), LIMITS["maxSeq"], default=256)
    lora = g("lora")
    if lora is not _ABSENT:
        out["lora"] = _lora(lora, count, number, at)
    for k in cfg:
        if k not in FIELDS and k != "lora":
            at(k, "unknown option")
    if issues:
        raise SpecError(issues)
    # Key order as spec.ts produces it: zod's output keeps the schema order of the keys it has, then
    # `{ ...s, kvHeads, mlpWidth, headDim }` appends the optional ones the input left out (config_json round-trips
    # byte for byte between the engines).
    spec = {"family": FAMILY, "vocabSize": vocab}
    for k, v in out.items():
        if v is not None:
            spec[k] = v
    if out["kvHeads"] is None:
        spec["kvHeads"] = spec["heads"]
    if out["mlpWidth"] is None:
        spec["mlpWidth"] = 4 * spec["width"]
    free_hd = out["headDim"] is not None
    if not free_hd:
        spec["headDim"] = spec["width"] // spec["heads"]
        # without headDim, heads must divide width (the default head dimension is width / heads)
        if spec["width"] % spec["heads"] != 0:
            at("heads", f"must divide width ({spec['width']} is not a multiple of {spec['heads']}), or set headDim")
    if not issues and spec["positions"] == "rope" and spec["headDim"] % 2 != 0:
        at("headDim" if free_hd else "positions",
           f"rope needs an even head dimension ({'headDim' if free_hd else 'width / heads'} = {spec['headDim']})")
    if spec["heads"] % spec["kvHeads"] != 0:
        at("kvHeads", f"must divide heads ({spec['heads']} is not a multiple of {spec['kvHeads']})")
    if not issues:
        total = param_layout(spec)[1]
        if total > LIMITS["params"]:
            at("width", f"{total} parameters exceed the limit of {LIMITS['params']} (reduce width, layers, mlpWidth or vocabSize)")
    if not issues and "lora" in spec:
        have = [n[4:] for n, _, _, _ in param_layout(spec)[0] if n.startswith("l0.w")]
        spec["lora"]["targets"] = lora_targets(spec["lora"]["targets"], [t for t in LORA_TARGETS if t in have], at, "a projection")
    if issues:
        raise SpecError(issues)
    return spec


def lora_targets(targets, have, at, what):
    """`targets` in the model's order `have` (its targetable names); a name it lacks, or one named twice, is an issue."""
    for t in targets:
        if t not in have:
            at("lora.targets", f"{json.dumps(t)} is not {what} of this model (it has: {', '.join(have)})")
    for t in dict.fromkeys(targets):
        if targets.count(t) > 1:
            at("lora.targets", f"{json.dumps(t)} is named twice")
    return [t for t in have if t in targets]


def normalize_lora(v, prefix="spec", known=LORA_TARGETS):
    """A lora object alone ({rank, alpha, targets, baseSeed?, baseCheckpoint?}), its targets any names when `known` is
    None (a transformers model's module names, checked against the model by hf.normalize); raises SpecError."""
    issues = []

    def at(f, m):
        issues.append((f"{prefix}.{f}", m))
    count, _, _, number = _checks(at)
    out = _lora(v, count, number, at, known)
    if issues:
        raise SpecError(issues)
    return out


def _lora(v, count, number, at, known=LORA_TARGETS):
    """spec.ts's lora object: {rank, alpha, targets, baseSeed?}, in that key order; targets from `known` (None: any
    non-empty strings)."""
    if not isinstance(v, dict):
        at("lora", f"Invalid input: expected object, received {_type_name(v)}")
        return None
    out = {}
    out["rank"] = count("lora.rank", v.get("rank", _ABSENT), LIMITS["loraRank"])
    out["alpha"] = number("lora.alpha", v.get("alpha", _ABSENT), None, lambda a: "must be > 0" if not a > 0 else ("must be ≤ 1000000" if a > 1e6 else None))
    if out["alpha"] is None and "alpha" not in v:
        at("lora.alpha", "Invalid input: expected number, received undefined")
    t = v.get("targets", _ABSENT)
    if not isinstance(t, list):
        at("lora.targets", f"Invalid input: expected array, received {_type_name(None if t is _ABSENT else t)}")
    elif not t:
        at("lora.targets", "name at least one projection")
    else:
        for i, x in enumerate(t):
            if known is None and not (isinstance(x, str) and x):
                at(f"lora.targets[{i}]", f"must be a module name (a non-empty string), got {json.dumps(x)}")
            elif known is not None and x not in known:
                at(f"lora.targets[{i}]", f"unknown option {json.dumps(x)}; known: {', '.join(known)}")
        out["targets"] = list(t)
    seed = count("lora.baseSeed", v.get("baseSeed", _ABSENT), MAX_SAFE_INTEGER, minimum=0, optional=True)
    if seed is not None:
        out["baseSeed"] = seed
    ck = v.get("baseCheckpoint", _ABSENT)
    if ck is not _ABSENT:
        if not isinstance(ck, str) or not ck.startswith("/"):
            at("lora.baseCheckpoint", f"must be an absolute directory path, got {json.dumps(ck)}")
        elif seed is not None:
            at("lora.baseCheckpoint", "name the base by baseSeed or by baseCheckpoint, not both")
        else:
            out["baseCheckpoint"] = ck
    for k in v:
        if k not in ("rank", "alpha", "targets", "baseSeed", "baseCheckpoint"):
            at(f"lora.{k}", "unknown option")
    return out


def head_dim(s):
    return s["headDim"]


def param_layout(s):
    """([(name, offset, shape, kind)], total): spec.ts paramLayout, matrices stored [in, out] row-major."""
    D = s["width"]
    hd = s["headDim"]
    slots = []
    offset = 0

    def add(name, shape, kind):
        nonlocal offset
        size = 1
        for d in shape:
            size *= d
        slots.append((name, offset, tuple(shape), kind))
        offset += size

    def norm(name):
        add(f"{name}_g", [D], "gain")
        if s["norm"] == "layernorm":
            add(f"{name}_b", [D], "bias")

    def linear(layer, name, fan_in, fan_out, kind="matrix"):
        add(f"{layer}w{name}", [fan_in, fan_out], kind)
        if s["bias"]:
            add(f"{layer}b{name}", [fan_out], "bias")

    add("tok_emb", [s["vocabSize"], D], "embedding")
    if s["positions"] == "learned":
        add("pos_emb", [s["maxSeq"], D], "position")
    for layer in range(s["layers"]):
        p = f"l{layer}."
        norm(f"{p}ln1")
        linear(p, "q", D, s["heads"] * hd)
        linear(p, "k", D, s["kvHeads"] * hd)
        linear(p, "v", D, s["kvHeads"] * hd)
        if s["qkNorm"]:
            add(f"{p}lnq_g", [hd], "gain")
            add(f"{p}lnk_g", [hd], "gain")
        linear(p, "o", s["heads"] * hd, D, "residual-out")
        norm(f"{p}ln2")
        if s["mlp"] == "gelu":
            mlp = [("1", D, s["mlpWidth"], "matrix"), ("2", s["mlpWidth"], D, "residual-out")]
        else:
            mlp = [("g", D, s["mlpWidth"], "matrix"), ("u", D, s["mlpWidth"], "matrix"), ("d", s["mlpWidth"], D, "residual-out")]
        for n, i, o, kind in mlp:
            linear(p, n, i, o, kind)
    norm("lnf")
    if not s["tiedHead"]:
        add("head", [D, s["vocabSize"]], "matrix")
    return slots, offset


def spec_key(s):
    """spec.ts transformerSpecKey: equal keys, same model (a LoRA spec's adapter and base seed included). A
    transformers spec (hf.py: {"hf": config.json, ...}) is its config and maxSeq."""
    if "hf" in s:  # numbers as JavaScript holds them (a config sent back by TypeScript has 10000 for 10000.0)
        return json.dumps(_as_js(["hf", s["vocabSize"], s["hf"], s["maxSeq"], *([s["lora"]] if "lora" in s else [])]), sort_keys=True)
    key = [s[k] for k in ["family", "vocabSize"] + FIELDS]
    if "lora" in s:
        lo = s["lora"]
        key.append([lo["rank"], lo["alpha"], lo["targets"], lo.get("baseSeed"), lo.get("baseCheckpoint")])
    return json.dumps(key)


def _as_js(x):
    """x with every integral float an int, as JSON.parse gives it."""
    if isinstance(x, dict):
        return {k: _as_js(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_as_js(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def target_shapes(spec):
    """[(targeted matrix, fan in, fan out)] of a LoRA spec, in the adapter's order: per layer and target, the family's
    slots (`l0.wq`), or a transformers spec's targeted linear modules in the module's order (hf.normalize's
    `linears`, `model.layers.0.self_attn.q_proj`)."""
    if "hf" in spec:
        return [tuple(x) for x in spec["linears"]]
    base = {name: shape for name, _, shape, _ in param_layout(spec)[0]}
    return [(w, *base[w]) for w in (f"l{layer}.w{t}" for layer in range(spec["layers"]) for t in spec["lora"]["targets"])]


def adapter_layout(spec):
    """([(name, offset, shape, targeted matrix)], total): A [r, in] then B [out, r] per targeted matrix (target_shapes),
    named `l0.q.A` (the family's) or `<module>.A` (a transformers spec's)."""
    r = spec["lora"]["rank"]
    slots, offset = [], 0
    for w, fan_in, fan_out in target_shapes(spec):
        stem = w if "hf" in spec else w.replace(".w", ".", 1)
        for m, shape in (("A", (r, fan_in)), ("B", (fan_out, r))):
            slots.append((f"{stem}.{m}", offset, shape, w))
            offset += shape[0] * shape[1]
    return slots, offset


def base_spec(s):
    """The spec without its lora: the frozen base's."""
    return {k: v for k, v in s.items() if k not in ("lora", "linears")}


def js_number(x) -> str:
    """A number as JavaScript's JSON.stringify writes it (shortest round-trip digits, JS exponent rules)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    r = repr(float(x))
    sign = "-" if r.startswith("-") else ""
    r = r.lstrip("-")
    if "e" in r:
        mant, exp = r.split("e")
        exp = int(exp)
    else:
        mant, exp = r, 0
    if "." in mant:
        ip, fp = mant.split(".")
    else:
        ip, fp = mant, ""
    digits = (ip + fp).lstrip("0")
    # position of the decimal point relative to the digit string: value = 0.digits * 10^n
    lead_zeros = len(ip + fp) - len((ip + fp).lstrip("0"))
    n = len(ip) + exp - lead_zeros
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        s = digits + "0" * (n - k)
    elif 0 < n <= 21:
        s = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        es = f"e+{e}" if e >= 0 else f"e-{-e}"
        s = digits + es if k == 1 else digits[0] + "." + digits[1:] + es
    return sign + s


def config_json(s) -> str:
    """The normalized config (every field but family / vocabSize) as JSON, keys in the spec's order, JS number formatting;
    a transformers spec's is {"hf": config.json, "maxSeq": M, "lora"?: {...}}."""
    if "hf" in s:
        lora = {"lora": s["lora"]} if "lora" in s else {}
        return json.dumps({"hf": s["hf"], "maxSeq": s["maxSeq"], **lora}, separators=(",", ":"), sort_keys=True)
    parts = []
    for k in [k for k in s if k in FIELDS or k == "lora"]:
        v = s[k]
        if k == "lora":
            seed = f',"baseSeed":{v["baseSeed"]}' if "baseSeed" in v else ""
            if "baseCheckpoint" in v:
                seed = f',"baseCheckpoint":{json.dumps(v["baseCheckpoint"])}'
            targets = json.dumps(v["targets"], separators=(",", ":"))
            val = f'{{"rank":{v["rank"]},"alpha":{js_number(v["alpha"])},"targets":{targets}{seed}}}'
        elif isinstance(v, str):
            val = json.dumps(v)
        elif isinstance(v, bool):
            val = "true" if v else "false"
        elif isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            val = str(int(v))
        else:
            val = js_number(v)
        parts.append(f"{json.dumps(k)}:{val}")
    return "{" + ",".join(parts) + "}"
