#!/usr/bin/env python3
"""Small random Hugging Face-layout checkpoints and their reference logits.

Writes test/fixtures/hf/{gpt2,llama,qwen2,qwen3}-tiny/ (config.json + safetensors:
gpt2 F32 single file without the `transformer.` prefix and with the causal-mask
buffer real GPT-2 files carry; llama BF16 sharded with an index, GQA, untied
head; qwen2 F16 with q/k/v biases, tied head; qwen3 BF16 with head_dim 8 ≠
hidden/heads, per-head q/k RMSNorm, GQA, tied head) and
test/fixtures/hf/reference-logits.json: logits of fixed prompts, computed here
in float64 by PyTorch from the stored (dtype-rounded) weights, with the model
math written out directly (no transformers package). The TypeScript tests
compare Troupe's logits with these and need no Python.

Run once (Debian: apt-get install python3-torch): python3 tools/hf-fixtures.py
"""
import json
import math
import os
import struct

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'test', 'fixtures', 'hf')
PROMPTS = [[1, 5, 9, 13, 2, 7], [40, 3, 3, 0, 47, 22]]
DTYPES = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16}


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {'__metadata__': {'format': 'pt'}}, [], 0
    for name, t in tensors:
        raw = t.to(DTYPES[dtype]).contiguous().view(torch.uint8).numpy().tobytes() if dtype != 'F32' else t.to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {'dtype': dtype, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b' ' * ((8 - (8 + len(head)) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(head)) + head + b''.join(blobs))


def rounded(tensors, dtype):
    """The weights as the file holds them, back in float64 (what any reader computes with)."""
    return {n: t.to(DTYPES[dtype]).to(torch.float64) for n, t in tensors}


def layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * g + b


def rmsnorm(x, g, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def attend(q, k, v):
    """q [S, H, hd], k/v [S, Hkv, hd]; query head h reads kv head h // (H / Hkv); causal."""
    S, H, hd = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    scores = torch.einsum('shd,thd->hst', q, k) / math.sqrt(hd)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    p = torch.softmax(scores.masked_fill(mask, float('-inf')), -1)
    return torch.einsum('hst,thd->shd', p, v).reshape(S, H * hd)


def gpt2_logits(c, w, ids):
    D, H = c['n_embd'], c['n_head']
    x = w['wte.weight'][ids] + w['wpe.weight'][: len(ids)]
    for l in range(c['n_layer']):
        p = f'h.{l}.'
        h = layernorm(x, w[p + 'ln_1.weight'], w[p + 'ln_1.bias'], c['layer_norm_epsilon'])
        q, k, v = (h @ w[p + 'attn.c_attn.weight'] + w[p + 'attn.c_attn.bias']).split(D, -1)
        S = len(ids)
        a = attend(q.reshape(S, H, -1), k.reshape(S, H, -1), v.reshape(S, H, -1))
        x = x + a @ w[p + 'attn.c_proj.weight'] + w[p + 'attn.c_proj.bias']
        h = layernorm(x, w[p + 'ln_2.weight'], w[p + 'ln_2.bias'], c['layer_norm_epsilon'])
        f = h @ w[p + 'mlp.c_fc.weight'] + w[p + 'mlp.c_fc.bias']
        f = 0.5 * f * (1 + torch.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ w[p + 'mlp.c_proj.weight'] + w[p + 'mlp.c_proj.bias']
    x = layernorm(x, w['ln_f.weight'], w['ln_f.bias'], c['layer_norm_epsilon'])
    return x @ w['wte.weight'].T


def rope(x, theta):
    """Llama's rotate_half form: pairs (i, i + hd/2) rotated by pos·θ^(−2i/hd)."""
    S, _, hd = x.shape
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :], torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    rot = torch.cat([-x[..., hd // 2:], x[..., : hd // 2]], -1)
    return x * cos + rot * sin


def llama_logits(c, w, ids):
    H, Hkv, eps = c['num_attention_heads'], c['num_key_value_heads'], c['rms_norm_eps']
    S = len(ids)
    lin = lambda x, name: x @ w[name + '.weight'].T + (w[name + '.bias'] if name + '.bias' in w else 0)
    x = w['model.embed_tokens.weight'][ids]
    for l in range(c['num_hidden_layers']):
        p = f'model.layers.{l}.'
        h = rmsnorm(x, w[p + 'input_layernorm.weight'], eps)
        q = lin(h, p + 'self_attn.q_proj').reshape(S, H, -1)
        k = lin(h, p + 'self_attn.k_proj').reshape(S, Hkv, -1)
        if p + 'self_attn.q_norm.weight' in w:  # qwen3: RMSNorm of each head before the rotation
            q = rmsnorm(q, w[p + 'self_attn.q_norm.weight'], eps)
            k = rmsnorm(k, w[p + 'self_attn.k_norm.weight'], eps)
        q, k = rope(q, c['rope_theta']), rope(k, c['rope_theta'])
        v = lin(h, p + 'self_attn.v_proj').reshape(S, Hkv, -1)
        x = x + lin(attend(q, k, v), p + 'self_attn.o_proj')
        h = rmsnorm(x, w[p + 'post_attention_layernorm.weight'], eps)
        g = lin(h, p + 'mlp.gate_proj')
        x = x + lin(g * torch.sigmoid(g) * lin(h, p + 'mlp.up_proj'), p + 'mlp.down_proj')
    x = rmsnorm(x, w['model.norm.weight'], eps)
    head = w['lm_head.weight'] if 'lm_head.weight' in w else w['model.embed_tokens.weight']
    return x @ head.T


def rand(gen, *shape, scale=0.3, centre=0.0):
    return centre + scale * torch.randn(*shape, generator=gen, dtype=torch.float64)


def gpt2(gen):
    c = {'model_type': 'gpt2', 'architectures': ['GPT2LMHeadModel'], 'vocab_size': 48, 'n_embd': 16, 'n_layer': 2, 'n_head': 2,
         'n_inner': None, 'n_positions': 32, 'n_ctx': 32, 'layer_norm_epsilon': 1e-5, 'activation_function': 'gelu_new',
         'bos_token_id': 1, 'eos_token_id': 2, 'tie_word_embeddings': True, 'torch_dtype': 'float32'}
    D, V = 16, 48
    t = [('wte.weight', rand(gen, V, D)), ('wpe.weight', rand(gen, 32, D, scale=0.1))]
    for l in range(2):
        p = f'h.{l}.'
        t += [(p + 'ln_1.weight', rand(gen, D, scale=0.2, centre=1)), (p + 'ln_1.bias', rand(gen, D, scale=0.1)),
              (p + 'attn.bias', torch.tril(torch.ones(32, 32, dtype=torch.float64)).view(1, 1, 32, 32)),
              (p + 'attn.c_attn.weight', rand(gen, D, 3 * D)), (p + 'attn.c_attn.bias', rand(gen, 3 * D, scale=0.1)),
              (p + 'attn.c_proj.weight', rand(gen, D, D)), (p + 'attn.c_proj.bias', rand(gen, D, scale=0.1)),
              (p + 'ln_2.weight', rand(gen, D, scale=0.2, centre=1)), (p + 'ln_2.bias', rand(gen, D, scale=0.1)),
              (p + 'mlp.c_fc.weight', rand(gen, D, 4 * D)), (p + 'mlp.c_fc.bias', rand(gen, 4 * D, scale=0.1)),
              (p + 'mlp.c_proj.weight', rand(gen, 4 * D, D)), (p + 'mlp.c_proj.bias', rand(gen, D, scale=0.1))]
    t += [('ln_f.weight', rand(gen, D, scale=0.2, centre=1)), ('ln_f.bias', rand(gen, D, scale=0.1))]
    return c, t


def llama_like(gen, model_type, H, Hkv, F, tied, qkv_bias):
    D, V, L = 16, 48, 2
    hd = D // H
    c = {'model_type': model_type, 'architectures': ['LlamaForCausalLM' if model_type == 'llama' else 'Qwen2ForCausalLM'],
         'vocab_size': V, 'hidden_size': D, 'num_hidden_layers': L, 'num_attention_heads': H, 'num_key_value_heads': Hkv,
         'intermediate_size': F, 'max_position_embeddings': 64, 'rms_norm_eps': 1e-6, 'rope_theta': 10000.0 if model_type == 'llama' else 1000000.0,
         'hidden_act': 'silu', 'tie_word_embeddings': tied, 'bos_token_id': 1, 'eos_token_id': 2, 'rope_scaling': None}
    if model_type == 'llama':
        c.update({'attention_bias': False, 'mlp_bias': False})
    else:
        c.update({'use_sliding_window': False})
    t = [('model.embed_tokens.weight', rand(gen, V, D))]
    for l in range(L):
        p = f'model.layers.{l}.'
        t += [(p + 'input_layernorm.weight', rand(gen, D, scale=0.2, centre=1))]
        for name, out in (('q_proj', H * hd), ('k_proj', Hkv * hd), ('v_proj', Hkv * hd)):
            t += [(p + f'self_attn.{name}.weight', rand(gen, out, D))]
            if qkv_bias:
                t += [(p + f'self_attn.{name}.bias', rand(gen, out, scale=0.1))]
        t += [(p + 'self_attn.o_proj.weight', rand(gen, D, H * hd)), (p + 'post_attention_layernorm.weight', rand(gen, D, scale=0.2, centre=1)),
              (p + 'mlp.gate_proj.weight', rand(gen, F, D)), (p + 'mlp.up_proj.weight', rand(gen, F, D)), (p + 'mlp.down_proj.weight', rand(gen, D, F))]
    t += [('model.norm.weight', rand(gen, D, scale=0.2, centre=1))]
    if not tied:
        t += [('lm_head.weight', rand(gen, V, D))]
    return c, t


def qwen3(gen):
    """Qwen3's layout: a head_dim of its own (8, while hidden/heads = 4), q_norm / k_norm [head_dim], no biases."""
    D, V, L, H, Hkv, hd, F = 16, 48, 2, 4, 2, 8, 24
    c = {'model_type': 'qwen3', 'architectures': ['Qwen3ForCausalLM'], 'vocab_size': V, 'hidden_size': D, 'num_hidden_layers': L,
         'num_attention_heads': H, 'num_key_value_heads': Hkv, 'head_dim': hd, 'intermediate_size': F, 'max_position_embeddings': 64,
         'rms_norm_eps': 1e-6, 'rope_theta': 1000000.0, 'hidden_act': 'silu', 'tie_word_embeddings': True, 'attention_bias': False,
         'use_sliding_window': False, 'sliding_window': None, 'max_window_layers': L, 'bos_token_id': 1, 'eos_token_id': 2, 'rope_scaling': None}
    t = [('model.embed_tokens.weight', rand(gen, V, D))]
    for l in range(L):
        p = f'model.layers.{l}.'
        t += [(p + 'input_layernorm.weight', rand(gen, D, scale=0.2, centre=1)),
              (p + 'self_attn.q_proj.weight', rand(gen, H * hd, D)), (p + 'self_attn.k_proj.weight', rand(gen, Hkv * hd, D)),
              (p + 'self_attn.v_proj.weight', rand(gen, Hkv * hd, D)),
              (p + 'self_attn.q_norm.weight', rand(gen, hd, scale=0.2, centre=1)), (p + 'self_attn.k_norm.weight', rand(gen, hd, scale=0.2, centre=1)),
              (p + 'self_attn.o_proj.weight', rand(gen, D, H * hd)), (p + 'post_attention_layernorm.weight', rand(gen, D, scale=0.2, centre=1)),
              (p + 'mlp.gate_proj.weight', rand(gen, F, D)), (p + 'mlp.up_proj.weight', rand(gen, F, D)), (p + 'mlp.down_proj.weight', rand(gen, D, F))]
    t += [('model.norm.weight', rand(gen, D, scale=0.2, centre=1))]
    return c, t


def main():
    gen = torch.Generator().manual_seed(20261123)
    out = {'tolerance': 'see test/unit/checkpoints/hf-logits.test.ts', 'prompts': PROMPTS, 'models': {}}
    models = [
        ('gpt2-tiny', 'F32', gpt2(gen), gpt2_logits, 1),
        ('llama-tiny', 'BF16', llama_like(gen, 'llama', H=4, Hkv=2, F=24, tied=False, qkv_bias=False), llama_logits, 2),
        ('qwen2-tiny', 'F16', llama_like(gen, 'qwen2', H=4, Hkv=1, F=32, tied=True, qkv_bias=True), llama_logits, 1),
        # drawn after the others, so their bytes do not change
        ('qwen3-tiny', 'BF16', qwen3(gen), llama_logits, 1),
    ]
    for name, dtype, (config, tensors), forward, shards in models:
        d = os.path.join(ROOT, name)
        os.makedirs(d, exist_ok=True)
        config['torch_dtype'] = {'F32': 'float32', 'F16': 'float16', 'BF16': 'bfloat16'}[dtype]
        with open(os.path.join(d, 'config.json'), 'w') as f:
            json.dump(config, f, indent=2)
        if shards == 1:
            write_safetensors(os.path.join(d, 'model.safetensors'), tensors, dtype)
        else:
            half = len(tensors) // 2
            parts = [tensors[:half], tensors[half:]]
            weight_map = {}
            for i, part in enumerate(parts):
                file = f'model-{i + 1:05d}-of-{len(parts):05d}.safetensors'
                write_safetensors(os.path.join(d, file), part, dtype)
                weight_map.update({n: file for n, _ in part})
            with open(os.path.join(d, 'model.safetensors.index.json'), 'w') as f:
                json.dump({'metadata': {}, 'weight_map': weight_map}, f, indent=2)
        w = rounded(tensors, dtype)
        with torch.no_grad():
            logits = [forward(config, w, torch.tensor(p)).tolist() for p in PROMPTS]
        out['models'][name] = [[[float(f'{z:.9g}') for z in row] for row in seq] for seq in logits]
    with open(os.path.join(ROOT, 'reference-logits.json'), 'w') as f:
        json.dump(out, f, separators=(',', ':'))
        f.write('\n')


if __name__ == '__main__':
    main()
