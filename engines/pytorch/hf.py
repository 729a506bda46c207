"""The engine's model code: transformers' own modules (embeddings, norms, MLPs, rotary tables, q/k norms, soft-caps)
for every model the engine serves, with the weights supplied per call from a version's flat θ
(torch.func.functional_call), so one module serves every version of a model and a version stays one immutable tensor.

Two layouts of θ:
  - a transformer({...}) spec, or a checkpoint of model type gpt2 / llama / qwen2 / qwen3: the family's flat layout
    (spec.param_layout: the built-in engine's bytes), each transformers parameter a view of its slots, transposed
    where the family stores [in, out], concatenated where transformers fuses (GPT-2's c_attn); the architecture is
    the one checkpoint.config_for writes (gpt2, llama, qwen3). A spec no architecture computes (rope with LayerNorm
    or GELU, learned positions without GPT-2's LayerNorm, GELU and biases) is refused (not_computable);
  - any other causal LM transformers has ({"checkpoint": dir} of another model type, or a config those layouts
    cannot compute): {"family": "transformer", "vocabSize": V, "hf": <config.json>, "maxSeq": M, ...}, the config
    being the model (a stored spec rebuilds it without the directory); θ is the module's parameters in its own
    order and shapes (a tied head once). The built-in engine does not load these.

Attention is the one piece Troupe supplies, registered as transformers' attention implementation "troupe":
  - a row step (run_rows: Score, Generate's prefill and decode): every row is a one-token sequence at its own
    position that writes its key and value into its own cache slot and attends to that slot's keys 0..position in
    fixed shapes (steps.py), so a row's bits do not depend on what runs beside it and Score = Generate;
  - whole sequences (Update): causal attention, torch's SDPA where the model has no logit soft-cap or window.
LoRA (lora.py) adds each row's own adapter term through forward hooks on the targeted modules (the family's
projections; any linear module but the head of a transformers-layout model, named as PEFT names them).
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.func import functional_call

import checkpoint
import steps
import spec as specmod

IMPLEMENTATION = "troupe"
# config.json fields that say how the file was written, not what the model computes
NOT_THE_MODEL = ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "auto_map",
                 "use_cache", "output_attentions", "output_hidden_states", "return_dict")


class HfSpecError(Exception):
    pass


def _transformers():
    import transformers
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    if IMPLEMENTATION not in AttentionInterface._global_mapping:
        transformers.logging.set_verbosity_error()  # stderr carries the engine's JSON log lines
        AttentionInterface.register(IMPLEMENTATION, attention)
        AttentionMaskInterface.register(IMPLEMENTATION, lambda *a, **k: None)  # attention() masks by position itself
    return transformers


# ---------------------------------------------------------------- specs

def _float_fields(cls):
    """The config class's fields typed float and not int (JSON written by JavaScript gives 30 for 30.0)."""
    out = set()
    for c in reversed(cls.__mro__):
        for k, a in c.__dict__.get("__annotations__", {}).items():
            a = str(a)
            if "float" in a and "int" not in a:
                out.add(k)
    return out


def canonical(cfg: dict, where="spec.hf:"):
    """cfg with float fields as floats, and transformers' config object of it, checked to be a causal LM that
    transformers has."""
    t = _transformers()
    mt = cfg.get("model_type")
    if not isinstance(mt, str):
        raise HfSpecError(f"{where} model_type: required (a transformers model type)")
    try:
        cls = t.CONFIG_MAPPING[mt]
    except KeyError:
        raise HfSpecError(f"{where} model_type: {json.dumps(mt)} is not a model type transformers {t.__version__} knows")
    floats = _float_fields(cls)
    cfg = {k: (float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v) for k, v in cfg.items()}
    try:
        config = cls(**{k: v for k, v in cfg.items() if k != "model_type"})
    except Exception as e:  # transformers' own validation: the message names the field
        raise HfSpecError(f"{where} {e}")
    if cls not in t.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise HfSpecError(f"{where} model_type: {json.dumps(mt)} has no causal LM in transformers {t.__version__}")
    return cfg, config


def model_config(cfg: dict, where="spec.hf:"):
    return canonical(cfg, where)[1]


def _shape(config, name, *alts, default=None):
    for n in (name, *alts):
        v = getattr(config, n, None)
        if v is not None:
            return v
    if default is not None:
        return default
    raise HfSpecError(f"spec.hf.{name}: missing")


def normalize(vocab_size: int, config: dict, prefix="spec", where=None):
    """The spec of {"hf": config.json, "maxSeq"?}: the config as given (less the fields that say how it was written),
    and the shape fields memory.py sizes runs by, read from it. Errors name `where` (the config's place) + its field."""
    bad = [k for k in config if k not in ("hf", "maxSeq", "family", "vocabSize", "lora")]
    if bad:
        raise HfSpecError(f"{prefix}.{bad[0]}: comes from the checkpoint's config (spec.hf); leave it out")
    cfg = config.get("hf")
    if not isinstance(cfg, dict):
        raise HfSpecError(f"{prefix}.hf: must be a config.json object")
    cfg, c = canonical({k: v for k, v in cfg.items() if k not in NOT_THE_MODEL}, where or f"{prefix}.hf:")
    V = int(_shape(c, "vocab_size"))
    if vocab_size not in (0, V):
        raise HfSpecError(f"{prefix}.vocab_size: {vocab_size}, but the config has vocab_size {V} (send 0 or that)")
    bound = int(_shape(c, "max_position_embeddings", "n_positions", default=4096))
    M = config.get("maxSeq", bound)
    if not (isinstance(M, int) and not isinstance(M, bool) and 1 <= M <= bound):
        raise HfSpecError(f"{prefix}.maxSeq: must be an integer in [1, {bound}] (the config's max_position_embeddings), got {json.dumps(M)}")
    D = int(_shape(c, "hidden_size", "n_embd"))
    H = int(_shape(c, "num_attention_heads", "n_head"))
    act = str(getattr(c, "hidden_act", getattr(c, "activation_function", "silu")))
    module = meta_module(c)
    spec = {
        "family": "transformer", "vocabSize": V, "hf": cfg, "maxSeq": M,
        # read from the config for memory.py; not part of the spec's identity (the config is)
        "width": D, "layers": int(_shape(c, "num_hidden_layers", "n_layer")), "heads": H,
        "kvHeads": int(_shape(c, "num_key_value_heads", default=H)),
        "headDim": int(getattr(c, "head_dim", None) or D // H),
        "mlpWidth": int(_shape(c, "intermediate_size", "n_inner", default=4 * D)),
        "mlp": "gelu" if "gelu" in act else "swiglu", "qkNorm": False, "bias": False,
        "params": sum(p.numel() for p in module.parameters()),
    }
    if "lora" in config:
        spec["lora"], spec["linears"] = _lora(config["lora"], module, prefix)
    return spec


def linear_modules(module):
    """[(name, fan in, fan out)] of the module's linear maps an adapter may target, in its order: every nn.Linear but
    the output head (Update computes the head outside the module, in chunks)."""
    head = module.get_output_embeddings()
    return [(n, m.in_features, m.out_features) for n, m in module.named_modules()
            if isinstance(m, torch.nn.Linear) and m is not head]


def _lora(lora, module, prefix):
    """An adapter over a transformers model: the lora object (spec.normalize_lora's rules; its targets are module
    names, PEFT's target_modules: `q_proj` is every module whose last name is q_proj; or the family's projections
    q k v o g u d, naming the Llama layout's modules, checkpoint.LLAMA_PROJECTIONS, so that a team's adapters target
    any checkpoint with those modules), in the model's order, and the targeted linear maps [(name, in, out)]. The
    base is a checkpoint directory (lora.baseCheckpoint), never a seed."""
    out = specmod.normalize_lora(lora, prefix, known=None)
    if isinstance(out.get("alpha"), float) and out["alpha"].is_integer():
        out["alpha"] = int(out["alpha"])  # config_json writes it as JavaScript does (8, not 8.0)
    issues = []
    if "baseSeed" in out:
        issues.append((f"{prefix}.lora.baseSeed", "a transformers model (spec.hf) has no seeded version 0; name its checkpoint as lora.baseCheckpoint"))
    elif "baseCheckpoint" not in out:
        issues.append((f"{prefix}.lora.baseCheckpoint", "required over a transformers model (spec.hf): the directory of the frozen base"))
    linears = linear_modules(module)

    def named(n, t):  # module n is target t's: its last name, or the Llama layout's module of family projection t
        return n.rsplit(".", 1)[-1] == t or (t in checkpoint.LLAMA_PROJECTIONS and n.endswith("." + checkpoint.LLAMA_PROJECTIONS[t]))
    names = list(dict.fromkeys(n.rsplit(".", 1)[-1] for n, _, _ in linears))
    have = [t for t in specmod.LORA_TARGETS if any(named(n, t) for n, _, _ in linears)] + names
    out["targets"] = targets = specmod.lora_targets(out["targets"], have, lambda f, m: issues.append((f"{prefix}.{f}", m)), "a linear module")
    for n, _, _ in linears:
        both = [t for t in targets if named(n, t)]
        if len(both) > 1:
            issues.append((f"{prefix}.lora.targets", f"{' and '.join(json.dumps(t) for t in both)} name the same module ({n})"))
            break
    if issues:
        raise specmod.SpecError(issues)
    return out, [[n, i, o] for n, i, o in linears if any(named(n, t) for t in targets)]


def is_hf(spec):
    return "hf" in spec


def not_computable(spec, prefix="spec"):
    """(field, message) when no transformers architecture computes family spec `spec` (its base, for a LoRA spec), else
    None: the layouts are GPT-2 (learned positions, LayerNorm, GELU, biases, kvHeads = heads), Llama (RoPE, RMSNorm,
    SwiGLU) and Qwen3 (Llama's with q/k norms and a head width of its own)."""
    if "hf" in spec:
        return None
    s = specmod.base_spec(spec) if "lora" in spec else spec
    if family_config(s) is not None:
        return None
    why = "the PyTorch engine computes transformer specs with transformers' architectures: "
    if s["positions"] == "learned":
        for field, want in (("norm", "layernorm"), ("mlp", "gelu"), ("bias", True), ("qkNorm", False)):
            if s[field] != want:
                return f"{prefix}.{field}", (why + "learned positions are GPT-2's, which needs norm layernorm, mlp gelu, bias true, "
                                             f"no qkNorm (got {field} {json.dumps(s[field])}); the built-in engine computes it")
        return f"{prefix}.kvHeads", why + "learned positions are GPT-2's, which needs kvHeads = heads; the built-in engine computes it"
    for field, want in (("norm", "rmsnorm"), ("mlp", "swiglu")):
        if s[field] != want:
            return f"{prefix}.{field}", (why + "rope positions are Llama's or Qwen3's, which need norm rmsnorm and mlp swiglu "
                                         f"(got {field} {json.dumps(s[field])}); the built-in engine computes it")
    return f"{prefix}.headDim", why + "a head width other than width / heads needs qkNorm (Qwen3's layout); the built-in engine computes it"


def family_config(spec):
    """(config.json dict, model type, biases) of a family spec in the transformers architecture that computes it
    (checkpoint.config_for: gpt2 for learned positions, qwen3 with q/k norms, else llama), or None when none does
    (rope with LayerNorm or GELU, learned positions without GPT-2's norm, MLP and biases, a LoRA spec)."""
    if "lora" in spec or "hf" in spec:
        return None
    biases = {"qkv": spec["bias"], "o": spec["bias"], "mlp": spec["bias"]}
    try:
        cfg = checkpoint.config_for(spec, None, biases)
    except checkpoint.CheckpointError:
        return None
    if cfg["model_type"] != "gpt2":
        cfg["max_position_embeddings"] = spec["maxSeq"]
    cfg.update({"bos_token_id": None, "eos_token_id": None, "pad_token_id": None})  # the vocabulary is the team's
    return cfg, cfg["model_type"], biases


def meta_module(c):
    """Config c's causal LM on the meta device (nothing allocated), a tied head tied (its parameters count it once)."""
    t = _transformers()
    with torch.device("meta"):
        m = t.AutoModelForCausalLM.from_config(c)
    if getattr(c, "tie_word_embeddings", False):
        m.tie_weights()
    return m


def resolve_checkpoint(d, max_seq=None, prefix="spec"):
    """The spec of checkpoint directory d (its config.json), maxSeq lowered to max_seq if given."""
    path = os.path.join(d, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise HfSpecError(f"{prefix}.checkpoint: cannot read {path}: {e}")
    config = {"hf": cfg}
    if max_seq is not None:
        config["maxSeq"] = max_seq
    return normalize(0, config, prefix, f"{prefix}.checkpoint: {path}:")


# ---------------------------------------------------------------- attention

def attention(module, q, k, v, attention_mask, dropout=0.0, scaling=None, sliding_window=None, softcap=None, troupe_rows=None, **_):
    """transformers' attention interface: q [B, H, S, hd], k, v [B, Hkv, S, hd] → ([B, S, H, hd], None)."""
    scale = scaling if scaling is not None else 1.0 / math.sqrt(q.shape[-1])
    if troupe_rows is not None:
        return troupe_rows.attend(module.layer_idx, q, k, v, scale, sliding_window, softcap), None
    S = q.shape[2]
    if softcap is None and sliding_window is None:
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
        return ctx.transpose(1, 2), None
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    pos = torch.arange(S, device=q.device)
    hidden = pos[None, :] > pos[:, None]
    if sliding_window is not None:
        hidden = hidden | (pos[:, None] - pos[None, :] >= sliding_window)
    p = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return (p @ v).transpose(1, 2), None


class Rows:
    """One run_rows step's rows: their cache slots and positions, and their attention groups (steps.py)."""

    def __init__(self, cache, block, m, lengths, device):
        self.cache, self.m = cache, m
        _, pos, slot = torch.tensor(block, dtype=torch.long).t().to(device)
        self.pos, self.slot = pos, slot
        A = steps.ATT_ROWS
        self.groups = []
        for a in range(0, m, A):
            nk = next(n for n in lengths if n > max(r[1] for r in block[a:min(a + A, m)]))
            self.groups.append((a, slot[a:a + A], nk))

    def attend(self, layer, q, k, v, scale, window, softcap):
        """q [n, H, 1, hd], k, v [n, Hkv, 1, hd]: each real row writes its key and value at (slot, position) of this
        layer's cache and attends to its slot's keys up to its position → [n, 1, H, hd]."""
        n, H, _, hd = q.shape
        Hkv = k.shape[1]
        g, m = H // Hkv, self.m
        ck, cv = self.cache[layer]
        ck[self.slot[:m], :, self.pos[:m]] = k[:m, :, 0]
        cv[self.slot[:m], :, self.pos[:m]] = v[:m, :, 0]
        out = []
        for a, at, nk in self.groups:
            K, V = ck[at][:, :, :nk], cv[at][:, :, :nk]  # [A, Hkv, nk, hd]
            rows = K.shape[0]
            qg = q[a:a + rows].reshape(rows, Hkv, g, 1, hd)
            scores = (qg * K[:, :, None]).sum(-1) * scale  # [A, Hkv, g, nk]
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            keys = torch.arange(nk, device=q.device)[None, :]
            p_ = self.pos[a:a + rows, None]
            hidden = keys > p_
            if window is not None:
                hidden = hidden | (p_ - keys >= window)
            p = torch.softmax(scores.masked_fill(hidden[:, None, None, :], float("-inf")), dim=-1)
            out.append((p[..., None] * V[:, :, None]).sum(-2).reshape(rows, 1, H, hd))
        done = sum(o.shape[0] for o in out)
        if done < n:
            out.append(torch.zeros(n - done, 1, H, hd, device=q.device, dtype=q.dtype))
        return torch.cat(out)


# ---------------------------------------------------------------- the runtime

class HfTransformer:
    """A transformers module whose parameters come from θ per call: weights, run_rows and new_cache (Score, Generate),
    trunk and head (Update), P (θ's length)."""

    def __init__(self, spec, device):
        self.spec, self.device = spec, device
        family = None if is_hf(spec) else family_config(spec)
        if not is_hf(spec) and family is None:
            raise HfSpecError("spec: no transformers architecture computes this spec")
        config = model_config(spec["hf"] if family is None else family[0])
        config._attn_implementation = IMPLEMENTATION
        self.config = config
        self.module = self.build_module()
        self.names, self.shapes = [], []
        for name, p in self.module.named_parameters():  # a tied head appears once
            self.names.append(name)
            self.shapes.append(tuple(p.shape))
        self.sizes = [math.prod(s) for s in self.shapes]
        self.P = sum(self.sizes)
        self.family = None
        self._lora_rows = None  # a LoRA step's RowAdapters (lora.py), read by the hooks on the targeted modules
        if family is None:  # an adapter targets linear modules by name (spec.target_shapes): a hook on each
            modules = dict(self.module.named_modules())
            for name, _, _ in linear_modules(self.module):
                modules[name].register_forward_hook(self._lora_hook([(name, None)]))
        else:  # θ in the built-in engine's flat layout: each parameter a view (or concatenation) of slots
            slots, self.P = specmod.param_layout(spec)
            self.family = ([name for name, _, _, _ in slots], [tuple(shape) for _, _, shape, _ in slots],
                           [math.prod(shape) for _, _, shape, _ in slots], checkpoint.tensor_map(family[1], family[2], spec))
            self._hook_targets(self.family[3])
            mapped = {e[0] for e in self.family[3]}
            unmapped = [n for n in self.names if n not in mapped and not (n == "lm_head.weight" and spec["tiedHead"])]
            if unmapped:
                raise HfSpecError(f"spec: transformers' {family[1]} has parameters the family does not: {', '.join(unmapped[:3])}")
        embedding = self.module.get_input_embeddings().weight
        self.head_name = "lm_head.weight" if "lm_head.weight" in self.names else next(
            n for n, p in self.module.named_parameters() if p is embedding)
        self.softcap = getattr(config, "final_logit_softcapping", None)
        self._sizes = None
        self._keys = None

    def build_module(self):
        """A fresh transformers module of this model: parameters on the meta device (θ supplies them per call, or
        parallel.py materializes its shards), a tied head tied to the embedding, buffers (rotary tables) real on the
        device, in eval mode (no dropout)."""
        t = _transformers()
        from accelerate import init_empty_weights
        config = self.config
        with init_empty_weights(include_buffers=False):
            module = t.AutoModelForCausalLM.from_config(config, attn_implementation=IMPLEMENTATION)
        module.eval()
        if getattr(config, "tie_word_embeddings", False) or getattr(config.get_text_config(), "tie_word_embeddings", False):
            module.tie_weights()  # the head is the embedding: one tensor in θ
        for mod in module.modules():
            for name, buf in list(mod.named_buffers(recurse=False)):
                if buf is not None:
                    mod._buffers[name] = buf.to(self.device)
        return module

    def _hook_targets(self, entries):
        """A forward hook on each module holding family matrices (q, k, v, o, MLP): in a LoRA step it adds each row's own
        adapter term to the module's output, PEFT's order (y = base(x) + (α/r)·B·A·x), in that matrix's columns (GPT-2's
        c_attn holds q, k and v side by side)."""
        modules = dict(self.module.named_modules())
        for name, shape, parts, _ in entries:
            if not name.endswith(".weight") or not all(p.split(".")[-1].startswith("w") for p in parts) or len(shape) != 2:
                continue
            if parts[0] in ("tok_emb", "pos_emb", "head"):
                continue
            widths = [self.family[1][self.family[0].index(p)][1] for p in parts]  # each slot's [in, out]: its columns
            cols, at = [], 0
            for p, w in zip(parts, widths):
                cols.append((p, None if len(parts) == 1 else (at, at + w)))
                at += w
            modules[name[:-len(".weight")]].register_forward_hook(self._lora_hook(cols))

    def _lora_hook(self, cols):
        """The hook of one module: cols [(targeted matrix, its output columns or None for all)]."""
        def hook(_module, inputs, output):
            rows = self._lora_rows
            if rows is None:
                return None
            x = inputs[0]
            for slot, span in cols:
                d = rows.delta(x, slot)
                if d is None:
                    continue
                if span is None:
                    output = output + d
                else:
                    a, b = span
                    output = torch.cat([output[..., :a], output[..., a:b] + d, output[..., b:]], dim=-1)
            return output
        return hook

    # ---- θ
    def slot_weights(self, theta):
        """θ's family slots as views by name (spec.param_layout): what LoRA merges into (lora.LoraModel)."""
        names, shapes, sizes, _ = self.family
        return {n: piece.view(s) for n, s, piece in zip(names, shapes, theta.split(sizes))}

    def assemble(self, slot):
        """{parameter name: tensor} of the family slots `slot`: views, transposed where the family stores [in, out] and
        transformers [out, in], concatenated where transformers fuses (GPT-2's c_attn)."""
        W = {}
        for name, shape, parts, transpose in self.family[3]:
            if transpose:
                W[name] = slot[parts[0]].t()
            elif len(parts) > 1:
                W[name] = torch.cat([slot[p] for p in parts], dim=-1)
            else:
                W[name] = slot[parts[0]].view(shape)
        return W

    def weights(self, theta, inference=False):
        """{parameter name: tensor} of θ for functional_call: views of θ's pieces (one split, whose backward is one
        concatenation), transposed where the family stores [in, out] and transformers [out, in], concatenated where
        transformers fuses (GPT-2's c_attn)."""
        if self.family is None:
            return {n: piece.view(s) for n, s, piece in zip(self.names, self.shapes, theta.split(self.sizes))}
        return self.assemble(self.slot_weights(theta))

    def unweights(self, tensors):
        """θ of {parameter name: tensor} (weights' inverse, both layouts): weights(θ) puts each of θ's elements in
        exactly one parameter (views, transposes, concatenations), so its vector-Jacobian product with `tensors` puts
        each value back in its slot, copied, not added."""
        x = torch.zeros(self.P, dtype=torch.float32, device=self.device, requires_grad=True)
        with torch.enable_grad():
            W = self.weights(x)
            names = list(W)
            assert sum(W[n].numel() for n in names) == self.P, "weights(θ) is not a permutation of θ"
            (out,) = torch.autograd.grad([W[n] for n in names], x, [tensors[n].to(x.device, torch.float32) for n in names])
        return out

    def flatten(self, tensors):
        """θ float32 of a {name: tensor} state (a checkpoint's), in this module's order; a missing or misshapen tensor
        is an HfSpecError naming it."""
        assert self.family is None, "a family spec's θ is the flat layout's"
        out = []
        for n, s in zip(self.names, self.shapes):
            t = tensors.get(n)
            if t is None and n == "lm_head.weight":
                t = tensors.get(self.head_name)
            if t is None:
                raise HfSpecError(f"tensor {n} is missing")
            if tuple(t.shape) != s:
                raise HfSpecError(f"tensor {n} has shape {list(t.shape)}, the config implies {list(s)}")
            out.append(t.to(torch.float32).reshape(-1))
        return torch.cat(out)

    def _call(self, W, **kwargs):
        params = {k: v for k, v in W.items() if k != steps.LORA}
        return functional_call(self.module, params, args=(), kwargs=kwargs, tie_weights=True, strict=False)

    # ---- rows against a KV cache: Score, Generate's prefill and decode
    def new_cache(self, slots):
        s = self.spec
        shape = (slots, s["kvHeads"], s["maxSeq"], s["headDim"])
        return [[torch.zeros(shape, device=self.device), torch.zeros(shape, device=self.device)] for _ in range(s["layers"])]

    def step_sizes(self):
        """The STEP_SIZES whose rows get the same bits as in BLOCK-row steps of this model's linear maps (probed once, on
        random values: the kernels are chosen by shape); only BLOCK on CUDA."""
        if self._sizes is None:
            self._sizes = [steps.BLOCK]
            if str(self.device) == "cpu":
                gen = torch.Generator().manual_seed(0)
                shapes = {(m.in_features, min(m.out_features, steps.PROBE_COLUMNS), m.bias is not None)
                          for m in self.module.modules() if isinstance(m, torch.nn.Linear)}
                ok = set(steps.STEP_SIZES)
                for K, N, bias in sorted(shapes):
                    w = torch.rand(N, K, generator=gen)
                    b = torch.rand(N, generator=gen) if bias else None
                    x = torch.rand(max(steps.STEP_SIZES), K, generator=gen) - 0.5
                    full = F.linear(x[:steps.BLOCK], w, b)
                    for n in list(ok):
                        y = F.linear(x[:n], w, b)
                        if n < steps.BLOCK:
                            same = torch.equal(y, full[:n])
                        else:
                            same = all(torch.equal(y[a:a + steps.BLOCK], F.linear(x[a:a + steps.BLOCK], w, b))
                                       for a in [*range(0, n - steps.BLOCK, steps.BLOCK), n - steps.BLOCK])
                        if not same:
                            ok.discard(n)
                self._sizes = sorted(ok | {steps.BLOCK})
        return self._sizes

    def key_lengths(self):
        if self._keys is None:
            self._keys = steps.key_lengths(self.spec, self.device)
        return self._keys

    def run_rows(self, W, cache, rows, on_block, max_step=steps.BLOCK):
        """Rows [(token, position, cache slot)] in steps of the largest of step_sizes() up to max_step (the last: the
        smallest that holds what is left), in order → on_block(logits [step rows, V], first row, real rows) per step.
        Each row writes its key and value at (slot, position), then attends to its slot's keys 0..position, so a
        sequence's rows may be split over steps and share one with other sequences' rows."""
        pad = (0, 0, 0)
        sizes = [n for n in self.step_sizes() if n <= max_step] or self.step_sizes()[:1]
        for a in range(0, len(rows), sizes[-1]):
            block = rows[a:a + sizes[-1]]
            m = len(block)
            block = block + [pad] * (next(n for n in sizes if n >= m) - m)
            on_block(self.step(W, cache, block, m), a, m)

    def step(self, W, cache, block, m):
        r = Rows(cache, block, m, self.key_lengths(), self.device)
        tok = torch.tensor([b[0] for b in block], dtype=torch.long, device=self.device)[:, None]
        adapters = W.get(steps.LORA)  # a LoRA run: each row's adapter is its slot's (lora.Adapters.rows)
        self._lora_rows = None if adapters is None else adapters.rows(block)
        try:
            out = self._call(W, input_ids=tok, position_ids=r.pos[:, None], use_cache=False, troupe_rows=r)
        finally:
            self._lora_rows = None
        return out.logits[:, 0].float()

    # ---- whole sequences (Update)
    def trunk(self, W, tokens, checkpoint_layers=False):
        """tokens [B, S] (right-padded) → the final hidden states [B, S, D] (the model's last norm applied).
        `checkpoint_layers` (--activation-checkpointing): autograd keeps only each decoder layer's input and reruns the
        layer in the backward, the same kernels on the same values, so the gradient's bits do not change."""
        base = self.module.base_model_prefix
        sub = getattr(self.module, base)
        inner = {n[len(base) + 1:]: t for n, t in W.items() if n.startswith(base + ".")}
        pos = torch.arange(tokens.shape[1], device=tokens.device)[None].expand(tokens.shape[0], -1)
        undo = self._checkpoint_layers(sub, inner) if checkpoint_layers else []
        try:
            out = functional_call(sub, inner, args=(), kwargs={"input_ids": tokens, "position_ids": pos, "use_cache": False},
                                  tie_weights=True, strict=False)
        finally:
            for layer in undo:
                del layer.forward
        return out.last_hidden_state

    @staticmethod
    def _checkpoint_layers(sub, inner):
        """Each decoder layer's forward, for one call, as a torch.utils.checkpoint of the layer with its own weights from
        `inner` (transformers' own gradient checkpointing would rerun the layer after functional_call has put the meta
        parameters back). Returns the layers to restore."""
        from transformers.modeling_layers import GradientCheckpointingLayer
        layers = [(n, m) for n, m in sub.named_modules() if isinstance(m, GradientCheckpointingLayer)]
        for name, layer in layers:
            params = {n[len(name) + 1:]: t for n, t in inner.items() if n.startswith(name + ".")}
            plain = type(layer).forward.__get__(layer)
            inside = [False]

            def run(*args, _layer=layer, _params=params, _inside=inside, **kwargs):
                _inside[0] = True
                try:
                    return functional_call(_layer, _params, args=args, kwargs=kwargs, strict=False)
                finally:
                    _inside[0] = False

            def forward(*args, _plain=plain, _run=run, _inside=inside, **kwargs):
                if _inside[0]:
                    return _plain(*args, **kwargs)
                return torch.utils.checkpoint.checkpoint(_run, *args, use_reentrant=False, **kwargs)
            layer.forward = forward
        return [layer for _, layer in layers]

    def head(self, W, h):
        logits = F.linear(h, W[self.head_name])
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def runtime_for(spec, device):
    """The model code of a spec (the server refuses specs no transformers architecture computes: not_computable)."""
    return HfTransformer(spec, device)


def load_checkpoint(d, runtime):
    """θ float32 of checkpoint directory d for `runtime` (its module's parameters, by name)."""
    index = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    try:
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        for name in files:
            tensors.update(load_file(os.path.join(d, name)))
    except (OSError, ValueError, KeyError) as e:
        raise HfSpecError(f"{d}: cannot read the weights: {e}")
    prefix = runtime.module.base_model_prefix + "."
    if not any(n.startswith(prefix) for n in tensors):  # a checkpoint saved from the base model alone
        tensors = {(n if n.startswith("lm_head.") else prefix + n): t for n, t in tensors.items()}
    return runtime.flatten(tensors)


if __name__ == "__main__":  # python hf.py targets SPEC: a LoRA spec's targeted modules [[name, in, out]] (engines/checkpoints/peft.ts)
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "targets":
        sys.exit("usage: python hf.py targets '{\"family\": \"transformer\", \"vocabSize\": V, \"hf\": {...}, \"lora\": {...}}'")
    given = json.loads(sys.argv[2])
    try:
        s = normalize(given.get("vocabSize", 0), {k: v for k, v in given.items() if k not in ("family", "vocabSize")})
    except (HfSpecError, specmod.SpecError) as e:
        sys.exit(str(e))
    if "lora" not in s:
        sys.exit("spec.lora: required (the spec of an adapter)")
    print(json.dumps(specmod.target_shapes(s)))
