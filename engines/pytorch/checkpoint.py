"""Hugging Face-layout model directories ↔ a transformer spec + flat θ (spec.py's layout), read and
written here with numpy alone, so the engine needs neither `transformers` nor `safetensors` (Debian's
torch 1.13 is enough). The same mapping as the built-in engine's engines/checkpoints/ (hf-config.ts,
hf-layout.ts, safetensors.ts), written independently; the interop test checks that both give the
same θ bytes and the same exported files.

  config.json      model_type gpt2 | llama | qwen2 | qwen3; anything the family cannot compute exactly
                   (another activation, rope scaling, sliding windows, …) is refused naming the field
  weights          model.safetensors, or model.safetensors.index.json + its shards; F32/F16/BF16/F64
  export           config.json (the source's, shape fields rewritten) + model.safetensors in the
                   source dtype when every value fits it exactly (else F32) + the source's tokenizer files

HF linear weights are [out, in] and θ's are [in, out] (transposed); GPT-2's Conv1D weights are already
[in, out] and its fused c_attn is split by columns into wq, wk, wv.
"""
import json
import os
import re
import shutil
import struct
import sys
import tempfile

import numpy as np

import spec as specmod

MODEL_TYPES = ["gpt2", "llama", "qwen2", "qwen3"]
LOADER = f"own safetensors loader for model types {'/'.join(MODEL_TYPES)}; transformers for every other causal LM"
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}
TORCH_DTYPE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
TORCH_NAME = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
MAX_HEADER = 100 * 1024 * 1024
# buffers some writers include that are not parameters (causal masks, rope tables)
IGNORED = re.compile(r"(^|\.)attn\.(bias|masked_bias)$|rotary_emb\.inv_freq$")
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json", "vocab.json",
                   "merges.txt", "chat_template.jinja"]
# what a checkpoint model's spec may still set: everything else is its config.json's
CHECKPOINT_KEEPS = ("checkpoint", "maxSeq")


class CheckpointError(Exception):
    """A directory that cannot be this model: the message names the file and the field or tensor."""


class Unsupported(CheckpointError):
    """A valid config.json that the engine's own layouts cannot compute (another activation, rope scaling, sliding
    windows, ...): transformers computes it instead (hf.py)."""


# ---------------------------------------------------------------- safetensors

def _widen(raw: bytes, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)  # exact
    if dtype == "BF16":  # the top 16 bits of a float32: exact
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, dtype="<f8").astype(np.float32)


def read_safetensors(path):
    """{name: (dtype, shape, float32 array)} of one file; every rule checked before a byte is trusted."""
    try:
        with open(path, "rb") as f:
            b = f.read()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})")

    def fail(m):
        raise CheckpointError(f"{path}: {m}")
    if len(b) < 8:
        fail(f"{len(b)} bytes: too short for the 8-byte header length")
    n = struct.unpack("<Q", b[:8])[0]
    if n > min(MAX_HEADER, len(b) - 8):
        fail(f"header length {n} exceeds the file ({len(b)} bytes: truncated?) or the {MAX_HEADER}-byte limit")
    try:
        header = json.loads(b[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"header is not UTF-8 JSON ({e})")
    if not isinstance(header, dict):
        fail("header must be a JSON object")
    data = memoryview(b)[8 + n:]
    out, ranges = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue

        def at(m):
            fail(f"tensor {json.dumps(name)}: {m}")
        if not isinstance(e, dict):
            at("entry must be an object")
        dtype = e.get("dtype")
        if dtype not in DTYPE_BYTES:
            at(f"dtype {json.dumps(dtype)} is not supported (F32, F16, BF16, F64)")
        shape = e.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            at("shape must be an array of non-negative integers")
        offs = e.get("data_offsets")
        if not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs):
            at("data_offsets must be [begin, end] integers")
        begin, end = offs
        if begin > end:
            at(f"data_offsets [{begin}, {end}]: begin is after end")
        if end > len(data):
            at(f"data_offsets [{begin}, {end}] reach past the file's {len(data)} data bytes (the file is truncated?)")
        count = int(np.prod(shape)) if shape else 1
        if count * DTYPE_BYTES[dtype] != end - begin:
            at(f"shape {shape} × {dtype} is {count * DTYPE_BYTES[dtype]} bytes but data_offsets span {end - begin}")
        ranges.append((begin, end, name))
        out[name] = (dtype, list(shape), _widen(bytes(data[begin:end]), dtype))
    ranges.sort()
    for (b0, e0, n0), (b1, _, n1) in zip(ranges, ranges[1:]):
        if b1 < e0:
            fail(f"tensors {json.dumps(n0)} and {json.dumps(n1)} overlap")
    return out


def _exact_bits(a: np.ndarray, dtype: str):
    """a's bits in dtype (uint16), or None when some value is not exactly representable."""
    if dtype == "F16":
        h = a.astype("<f2")
        return h.view("<u2") if np.array_equal(h.astype(np.float32), a, equal_nan=True) else None
    u = a.astype(np.float32).view(np.uint32)
    return (u >> 16).astype("<u2") if not np.any(u & 0xFFFF) else None


def write_safetensors(path, tensors, dtype, metadata=None):
    """tensors [(name, shape, float32 array)] in this order, every value exactly as dtype holds it."""
    header = {"__metadata__": metadata} if metadata else {}
    blobs, offset = [], 0
    for name, shape, a in tensors:
        if dtype == "F32":
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        else:
            bits = _exact_bits(np.ascontiguousarray(a, dtype=np.float32), dtype)
            if bits is None:
                raise CheckpointError(f"export: tensor {name} has values that {dtype} cannot hold exactly")
            raw = bits.tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((8 - (8 + len(head)) % 8) % 8)  # tensor data 8-byte aligned, as the reference writer does
    _write_atomic(path, struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _write_atomic(path, data: bytes):
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- config.json

def parse_config(c, file="config.json"):
    """(model_type, options for spec.normalize incl. vocabSize, biases {qkv, o, mlp}); CheckpointError names the field."""
    issues = []
    unsupported = []

    def bad(field, m):
        issues.append(f"{field}: {m}")

    if not isinstance(c, dict):
        raise CheckpointError(f"{file}: (root): must be a JSON object")

    def get(field, fallback):
        v = c.get(field)
        return fallback if v is None else v

    def integer(field, fallback=None):
        v = get(field, fallback)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            bad(field, "required" if v is None else f"must be a positive integer, got {json.dumps(v)}")
            return 1
        return v

    def num(field, fallback):
        v = get(field, fallback)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0):
            bad(field, f"must be a positive number, got {json.dumps(v)}")
            return fallback
        return v

    def flag(field, fallback):
        v = get(field, fallback)
        if not isinstance(v, bool):
            bad(field, f"must be true or false, got {json.dumps(v)}")
            return fallback
        return v

    def refuse(field, ok, why):
        if field in c and not ok(c[field]):
            unsupported.append(f"{field}: {json.dumps(c[field])} is not supported: {why}")

    def rope_theta():
        """newer transformers write rope_theta inside rope_parameters: read there, or the default would be silently another model"""
        rp = c.get("rope_parameters")
        if rp is None:
            return num("rope_theta", 10_000)
        plain = (isinstance(rp, dict) and rp.get("rope_type", "default") == "default" and all(k in ("rope_type", "rope_theta") for k in rp)
                 and isinstance(rp.get("rope_theta"), (int, float)) and not isinstance(rp.get("rope_theta"), bool) and rp["rope_theta"] > 0
                 and (c.get("rope_theta") is None or c.get("rope_theta") == rp["rope_theta"]))
        if not plain:
            unsupported.append(f"rope_parameters: {json.dumps(rp)} is not supported: "
                               "only {\"rope_type\": \"default\", \"rope_theta\": θ} agreeing with rope_theta")
        return rp["rope_theta"] if plain else 10_000

    mt = c.get("model_type")
    if mt not in MODEL_TYPES:
        raise CheckpointError(f"{file}: model_type: {json.dumps(mt)} is not supported (supported: {', '.join(MODEL_TYPES)})")
    if mt == "gpt2":
        width = integer("n_embd")
        refuse("activation_function", lambda v: v == "gelu_new", "only GPT-2's tanh GELU (gelu_new) is implemented")
        refuse("scale_attn_weights", lambda v: v is True, "attention is always scaled by 1/√headDim")
        refuse("scale_attn_by_inverse_layer_idx", lambda v: v is False, "per-layer attention scaling is not implemented")
        positions = integer("n_positions")
        heads = integer("n_head")
        opts = {"vocabSize": integer("vocab_size"), "width": width, "layers": integer("n_layer"), "heads": heads, "kvHeads": heads,
                "mlpWidth": 4 * width if c.get("n_inner") is None else integer("n_inner"),
                "positions": "learned", "ropeTheta": 10_000, "norm": "layernorm", "normEps": num("layer_norm_epsilon", 1e-5),
                "qkNorm": False, "mlp": "gelu", "bias": True, "tiedHead": flag("tie_word_embeddings", True), "maxSeq": positions}
        if width % heads == 0:
            opts["headDim"] = width // heads
        biases = {"qkv": True, "o": True, "mlp": True}
        if positions > specmod.LIMITS["maxSeq"]:
            bad("n_positions", f"must be ≤ {specmod.LIMITS['maxSeq']} (learned positions are stored for every one)")
    else:
        qwen3 = mt == "qwen3"
        heads = integer("num_attention_heads")
        width = integer("hidden_size")
        refuse("hidden_act", lambda v: v == "silu", "only SwiGLU (silu) MLPs are implemented")
        refuse("rope_scaling", lambda v: v is None, "rope scaling is not implemented")
        if not qwen3:
            refuse("head_dim", lambda v: v is None or v == width / heads,
                   f"the head dimension must be hidden_size / num_attention_heads = {specmod.js_number(width / heads)}")
        refuse("partial_rotary_factor", lambda v: v == 1, "rope on every head dimension only")
        refuse("use_sliding_window", lambda v: v is False, "sliding-window attention is not implemented")
        refuse("layer_types", lambda v: v is None or (isinstance(v, list) and all(t == "full_attention" for t in v)),
               "sliding-window attention is not implemented (every layer must be full_attention)")
        # Llama's and Qwen3's attention_bias covers q/k/v and o_proj; Qwen2 has q/k/v biases only
        attention_bias = True if mt == "qwen2" else flag("attention_bias", False)
        mlp_bias = flag("mlp_bias", False) if mt == "llama" else False
        opts = {"vocabSize": integer("vocab_size"), "width": width, "layers": integer("num_hidden_layers"), "heads": heads,
                "kvHeads": integer("num_key_value_heads", heads)}
        if qwen3:  # Qwen3's head dimension is its own field (transformers' default 128), with q/k RMSNorm per head
            opts["headDim"] = integer("head_dim", 128)
        elif width % heads == 0:
            opts["headDim"] = width // heads
        opts.update({"mlpWidth": integer("intermediate_size"), "positions": "rope", "ropeTheta": rope_theta(),
                     "norm": "rmsnorm", "normEps": num("rms_norm_eps", 1e-6), "qkNorm": qwen3, "mlp": "swiglu",
                     "bias": attention_bias or mlp_bias, "tiedHead": flag("tie_word_embeddings", False),
                     # rope has no table, so the family's bound applies; a spec may ask for less
                     "maxSeq": min(integer("max_position_embeddings", 2048), specmod.LIMITS["maxSeq"])})
        biases = {"qkv": attention_bias, "o": mt != "qwen2" and attention_bias, "mlp": mlp_bias}
    if issues:
        raise CheckpointError(f"{file}: {'; '.join(issues + unsupported)}")
    if unsupported:
        raise Unsupported(f"{file}: {'; '.join(unsupported)}")
    return mt, opts, biases


def config_for(s, base, non_zero):
    """The config.json for spec s, starting from the source checkpoint's config when there is one. Qwen2 cannot
    hold an o_proj or MLP bias, so such weights are written as Llama with both bias flags. q/k norms are written
    as Qwen3 (the one layout with them)."""
    if s["qkNorm"]:
        if s["positions"] != "rope" or s["norm"] != "rmsnorm" or s["mlp"] != "swiglu":
            raise CheckpointError("export: q/k norms are written as qwen3, which needs rope, rmsnorm and swiglu")
        out = dict(base) if base and base.get("model_type") == "qwen3" else {"architectures": ["Qwen3ForCausalLM"], "hidden_act": "silu"}
        out["model_type"] = "qwen3"
        out.update(_rope_fields(s, base))
        out.update({"head_dim": s["headDim"], "attention_bias": non_zero["qkv"] or non_zero["o"]})
        return out
    if s["headDim"] * s["heads"] != s["width"]:
        raise CheckpointError(f"export: headDim {s['headDim']} ≠ width / heads is written only as qwen3, which needs qkNorm")
    if s["positions"] == "learned":
        if s["norm"] != "layernorm" or s["mlp"] != "gelu" or not s["bias"] or s["kvHeads"] != s["heads"]:
            raise CheckpointError("export: learned positions are written as gpt2, which needs layernorm, gelu, biases and kvHeads = heads")
        out = dict(base) if base and base.get("model_type") == "gpt2" else {"architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new"}
        out.update({"model_type": "gpt2", "vocab_size": s["vocabSize"], "n_embd": s["width"], "n_layer": s["layers"], "n_head": s["heads"],
                    "n_inner": s["mlpWidth"], "n_positions": s["maxSeq"], "n_ctx": s["maxSeq"], "layer_norm_epsilon": s["normEps"],
                    "tie_word_embeddings": s["tiedHead"]})
        return out
    if s["norm"] != "rmsnorm" or s["mlp"] != "swiglu":
        raise CheckpointError("export: rope models are written as llama/qwen2, which need rmsnorm and swiglu")
    as_qwen2 = bool(base) and base.get("model_type") == "qwen2" and not non_zero["o"] and not non_zero["mlp"]
    same = bool(base) and base.get("model_type") == ("qwen2" if as_qwen2 else "llama")
    out = dict(base) if same else {"architectures": ["Qwen2ForCausalLM" if as_qwen2 else "LlamaForCausalLM"], "hidden_act": "silu"}
    out["model_type"] = "qwen2" if as_qwen2 else "llama"
    out.update(_rope_fields(s, base))
    if not as_qwen2:
        out["attention_bias"] = non_zero["qkv"] or non_zero["o"]
        out["mlp_bias"] = non_zero["mlp"]
        if not same:
            out["architectures"] = ["LlamaForCausalLM"]
    return out


def _rope_fields(s, base):
    """The shape fields every rope layout (llama, qwen2, qwen3) writes alike."""
    mpe = base.get("max_position_embeddings") if base else None
    return {"vocab_size": s["vocabSize"], "hidden_size": s["width"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
            "num_key_value_heads": s["kvHeads"], "intermediate_size": s["mlpWidth"], "rope_theta": s["ropeTheta"], "rms_norm_eps": s["normEps"],
            "tie_word_embeddings": s["tiedHead"],
            "max_position_embeddings": mpe if isinstance(mpe, (int, float)) and not isinstance(mpe, bool) else s["maxSeq"]}


# ---------------------------------------------------------------- tensor map (one table for load and export)

# The Llama layout's module of each family projection (llama / qwen2 / qwen3, and every model type with Llama's
# module names: mistral, gemma2, olmo2, ...), under model.layers.<i>.
LLAMA_PROJECTIONS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
                     "g": "mlp.gate_proj", "u": "mlp.up_proj", "d": "mlp.down_proj"}


def tensor_map(model_type, biases, s):
    """[(name, checkpoint shape, θ slots concatenated along the last dim, transpose)]"""
    D = s["width"]
    hd = s["headDim"]
    out = []

    def add(name, shape, slots, transpose=False):
        out.append((name, list(shape), slots, transpose))
    if model_type == "gpt2":
        p = "transformer."
        add(f"{p}wte.weight", [s["vocabSize"], D], ["tok_emb"])
        add(f"{p}wpe.weight", [s["maxSeq"], D], ["pos_emb"])
        for layer in range(s["layers"]):
            h, L = f"{p}h.{layer}.", f"l{layer}."
            add(f"{h}ln_1.weight", [D], [f"{L}ln1_g"])
            add(f"{h}ln_1.bias", [D], [f"{L}ln1_b"])
            add(f"{h}attn.c_attn.weight", [D, 3 * D], [f"{L}wq", f"{L}wk", f"{L}wv"])
            add(f"{h}attn.c_attn.bias", [3 * D], [f"{L}bq", f"{L}bk", f"{L}bv"])
            add(f"{h}attn.c_proj.weight", [D, D], [f"{L}wo"])
            add(f"{h}attn.c_proj.bias", [D], [f"{L}bo"])
            add(f"{h}ln_2.weight", [D], [f"{L}ln2_g"])
            add(f"{h}ln_2.bias", [D], [f"{L}ln2_b"])
            add(f"{h}mlp.c_fc.weight", [D, s["mlpWidth"]], [f"{L}w1"])
            add(f"{h}mlp.c_fc.bias", [s["mlpWidth"]], [f"{L}b1"])
            add(f"{h}mlp.c_proj.weight", [s["mlpWidth"], D], [f"{L}w2"])
            add(f"{h}mlp.c_proj.bias", [D], [f"{L}b2"])
        add(f"{p}ln_f.weight", [D], ["lnf_g"])
        add(f"{p}ln_f.bias", [D], ["lnf_b"])
    else:
        add("model.embed_tokens.weight", [s["vocabSize"], D], ["tok_emb"])
        for layer in range(s["layers"]):
            h, L = f"model.layers.{layer}.", f"l{layer}."
            add(f"{h}input_layernorm.weight", [D], [f"{L}ln1_g"])

            def proj(name, slot, n_out, n_in, bias):
                add(f"{h}{name}.weight", [n_out, n_in], [f"{L}w{slot}"], True)
                if bias:
                    add(f"{h}{name}.bias", [n_out], [f"{L}b{slot}"])
            P = LLAMA_PROJECTIONS
            proj(P["q"], "q", s["heads"] * hd, D, biases["qkv"])
            proj(P["k"], "k", s["kvHeads"] * hd, D, biases["qkv"])
            proj(P["v"], "v", s["kvHeads"] * hd, D, biases["qkv"])
            if s["qkNorm"]:
                add(f"{h}self_attn.q_norm.weight", [hd], [f"{L}lnq_g"])
                add(f"{h}self_attn.k_norm.weight", [hd], [f"{L}lnk_g"])
            proj(P["o"], "o", D, s["heads"] * hd, biases["o"])
            add(f"{h}post_attention_layernorm.weight", [D], [f"{L}ln2_g"])
            proj(P["g"], "g", s["mlpWidth"], D, biases["mlp"])
            proj(P["u"], "u", s["mlpWidth"], D, biases["mlp"])
            proj(P["d"], "d", D, s["mlpWidth"], biases["mlp"])
        add("model.norm.weight", [D], ["lnf_g"])
    if not s["tiedHead"]:
        add("lm_head.weight", [s["vocabSize"], D], ["head"], True)
    return out


def _canonical(model_type, name):
    """A tensor name as tensor_map spells it (GPT-2 files often omit `transformer.`)."""
    return f"transformer.{name}" if model_type == "gpt2" and not name.startswith("transformer.") and name != "lm_head.weight" else name


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})")
    try:
        return json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"{path}: not JSON ({e})")


def _read_weights(d):
    single = os.path.join(d, "model.safetensors")
    index_file = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if not os.path.exists(index_file):
        raise CheckpointError(f"{d}: neither model.safetensors nor model.safetensors.index.json "
                              "(PyTorch .bin weights are not read: convert them to safetensors)")
    wm = _read_json(index_file).get("weight_map")
    if not isinstance(wm, dict):
        raise CheckpointError(f"{index_file}: weight_map must be an object of tensor name → file")
    shards = sorted(set(wm.values()), key=str)
    for shard in shards:
        if not isinstance(shard, str) or "/" in shard or "\\" in shard:
            raise CheckpointError(f"{index_file}: weight_map: {json.dumps(shard)} is not a file name in {d}")
    tensors = {}
    for shard in shards:
        f = os.path.join(d, shard)
        for name, t in read_safetensors(f).items():
            if wm.get(name) != shard:
                raise CheckpointError(f"{f}: tensor {name} is not listed for this shard in {index_file}")
            tensors[name] = t
    for name, shard in wm.items():
        if name not in tensors:
            raise CheckpointError(f"{index_file}: tensor {name} is missing from {shard}")
    return tensors


def model_type(d):
    """config.json's model_type of directory d (None when unreadable: resolve then names the problem)."""
    try:
        return _read_json(os.path.join(d, "config.json")).get("model_type")
    except CheckpointError:
        return None


def resolve(d, max_seq=None, prefix="spec"):
    """(spec, model_type, biases, config) of directory d from its config.json alone; max_seq may lower a rope model's bound."""
    cfg_file = os.path.join(d, "config.json")
    config = _read_json(cfg_file)
    mt, opts, biases = parse_config(config, cfg_file)
    if max_seq is not None:
        if opts["positions"] == "rope":
            opts["maxSeq"] = min(opts["maxSeq"], max_seq)
        elif max_seq > opts["maxSeq"]:  # a learned-position model keeps its whole table (as the built-in loader does)
            raise CheckpointError(f"{prefix}.maxSeq: {max_seq} is more than the checkpoint's {opts['maxSeq']} ({cfg_file} n_positions)")
    vocab = opts.pop("vocabSize")
    try:
        s = specmod.normalize(specmod.FAMILY, vocab, opts, cfg_file)
    except specmod.SpecError as e:
        raise CheckpointError(str(e))
    return s, mt, biases, config


def load(d, max_seq=None):
    """(spec, θ float32 [P], source dtype, config) of directory d."""
    s, mt, biases, config = resolve(d, max_seq)
    slots, total = specmod.param_layout(s)
    by_slot = {name: (off, shape) for name, off, shape, _ in slots}
    theta = np.zeros(total, dtype=np.float32)
    tensors = {_canonical(mt, n): t for n, t in _read_weights(d).items()}
    used = set()
    for name, shape, names, transpose in tensor_map(mt, biases, s):
        t = tensors.get(name)
        if t is None:
            raise CheckpointError(f"{d}: tensor {name} is missing (config.json model_type {mt})")
        if t[1] != shape:
            raise CheckpointError(f"{d}: tensor {name} has shape {t[1]}, config.json implies {shape}")
        used.add(name)
        a = t[2].reshape(shape if len(shape) == 2 else [1, shape[0]])
        if transpose:
            off, sh = by_slot[names[0]]
            theta[off:off + a.size] = a.T.reshape(-1)
            continue
        col = 0
        for n in names:
            off, sh = by_slot[n]
            w = int(np.prod(sh)) // a.shape[0]
            theta[off:off + a.shape[0] * w] = a[:, col:col + w].reshape(-1)
            col += w
    for name in tensors:
        if name in used or IGNORED.search(name) or (s["tiedHead"] and name == "lm_head.weight"):
            continue
        raise CheckpointError(f"{d}: tensor {name} has no place in a {mt} transformer of this config")
    dtype = next(iter(tensors.values()))[0] if tensors else "F32"
    return s, theta, dtype, config


def export(out, s, theta, source=None):
    """Write spec s + θ as a Hugging Face directory; `source` a directory whose config and tokenizer files to keep.
    Returns (files written, dtype)."""
    slots, total = specmod.param_layout(s)
    theta = np.asarray(theta, dtype=np.float32)
    if theta.size != total:
        raise CheckpointError(f"export: θ has {theta.size} values, the spec needs {total}")
    by_slot = {name: (off, shape) for name, off, shape, _ in slots}

    def non_zero(pattern):
        rx = re.compile(pattern)
        return any(rx.search(n) and np.any(theta[off:off + int(np.prod(sh))] != 0) for n, off, sh, _ in slots)
    base = _read_json(os.path.join(source, "config.json")) if source else None
    config = config_for(s, base, {"qkv": non_zero(r"\.b[qkv]$"), "o": non_zero(r"\.bo$"), "mlp": non_zero(r"\.b[gud12]$")})
    mt, _, biases = parse_config(config, "export config.json")
    entries = tensor_map(mt, biases, s)
    covered = {n for e in entries for n in e[2]}
    for n, off, sh, _ in slots:
        if n not in covered and np.any(theta[off:off + int(np.prod(sh))] != 0):
            raise CheckpointError(f"export: {n} is non-zero but {mt} has no such tensor")
    tensors = []
    for name, shape, names, transpose in entries:
        rows = shape[0] if len(shape) == 2 else 1
        if transpose:
            off, sh = by_slot[names[0]]
            a = theta[off:off + int(np.prod(sh))].reshape(sh).T
        else:
            parts = []
            for n in names:
                off, sh = by_slot[n]
                size = int(np.prod(sh))
                parts.append(theta[off:off + size].reshape(rows, size // rows))
            a = np.concatenate(parts, axis=1)
        tensors.append((name, shape, np.ascontiguousarray(a).reshape(-1)))
    wanted = TORCH_DTYPE.get(str(config.get("torch_dtype")), "F32")
    dtype = wanted if wanted == "F32" or all(_exact_bits(t[2], wanted) is not None for t in tensors) else "F32"
    config["torch_dtype"] = TORCH_NAME[dtype]
    os.makedirs(out, exist_ok=True)
    files = ["config.json", "model.safetensors"]
    _write_atomic(os.path.join(out, "config.json"), (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode())
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype, {"format": "pt"})
    for f in TOKENIZER_FILES:
        src = os.path.join(source, f) if source else None
        if src and os.path.exists(src):
            shutil.copyfile(src, os.path.join(out, f))
            files.append(f)
    return files, dtype


def checkpoint_options(config, prefix="spec"):
    """(dir, max_seq) of a spec config naming a checkpoint, or None; raises CheckpointError naming the field."""
    if "checkpoint" not in config:
        return None
    d = config["checkpoint"]
    issues = []
    if not isinstance(d, str) or not os.path.isabs(d):
        issues.append(f"{prefix}.checkpoint: must be an absolute directory path, got {json.dumps(d)}")
    for k in config:
        if k not in CHECKPOINT_KEEPS and k not in ("family", "vocabSize"):
            issues.append(f"{prefix}.{k}: comes from the checkpoint's config.json; leave it out")
    m = config.get("maxSeq")
    if m is not None and not (isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= specmod.LIMITS["maxSeq"]):
        issues.append(f"{prefix}.maxSeq: must be an integer in [1, {specmod.LIMITS['maxSeq']}], got {json.dumps(m)}")
    if issues:
        raise CheckpointError("; ".join(issues))
    return d, m


def main(argv):
    """`checkpoint.py export --weights FILE --spec JSON --out DIR [--from DIR]`: flat weights bytes (ExportVersion's
    `<sha256>.weights`) of a transformer spec (a VersionInfo's config_json + vocab_size) as a Hugging Face directory."""
    import argparse
    p = argparse.ArgumentParser(prog="checkpoint.py", description="flat transformer weights → Hugging Face directory")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--weights", required=True, help="float32 little-endian θ (an exported <sha256>.weights file)")
    e.add_argument("--spec", required=True, help='the spec: {"vocabSize": N, ...config_json fields}')
    e.add_argument("--out", required=True, help="directory to write (created if missing)")
    e.add_argument("--from", dest="source", help="the source checkpoint directory (its config fields and tokenizer files are kept)")
    a = p.parse_args(argv)
    try:
        cfg = json.loads(a.spec)
        s = specmod.normalize(specmod.FAMILY, cfg.pop("vocabSize", None), cfg, "--spec")
        with open(a.weights, "rb") as f:
            theta = np.frombuffer(f.read(), dtype="<f4").astype(np.float32)
        files, dtype = export(a.out, s, theta, a.source)
    except (ValueError, OSError, specmod.SpecError, CheckpointError) as err:
        sys.stderr.write(f"checkpoint.py export: {err}\n")
        return 1
    sys.stdout.write(json.dumps({"out": a.out, "files": files, "dtype": dtype}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
