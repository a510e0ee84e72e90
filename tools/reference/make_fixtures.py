#!/usr/bin/env python3
"""Writes tiny random-weight checkpoints of each supported family plus reference outputs.

Runs on the GPU machine (torch + transformers). For each fixture it writes, under OUT/<name>/:
  config.json, model*.safetensors (hub-style names, bf16/f16/f32), reference.safetensors with
  prompt_ids [T] i64, prefill_logits [T, V] f32, greedy_ids [N] i64, decode_logits [N, V] f32,
  and reference.json (versions, shapes). Weights are rounded to the stored dtype first and the
  reference runs in fp32 on those rounded values, so the engine sees exactly what torch saw.
Norm weights and biases get non-trivial values so a wrong formula shows.

Fixtures with attention sinks / sliding windows (gpt-oss) also get reference_bf16_kv.safetensors:
the same prompt and greedy ids with each layer's keys (after rope) and values rounded to bf16,
as a bf16 KV cache holds them (prefill_logits [T, V], decode_logits [N, V] teacher-forced along
greedy_ids), so the engine's bf16 KV cache is checked against what bf16 K/V give, not f32 K/V.

usage: make_fixtures.py OUT_DIR [--device cuda|cpu] [--only name,name]
       make_fixtures.py --bf16-kv-reference FIXTURE_DIR [--device cuda|cpu]
         (adds reference_bf16_kv.safetensors to an existing bf16-weight fixture)
"""
import json
import math
import os
import re
import sys

import torch
import transformers
from safetensors.torch import save_file

N_GREEDY = 16
PROMPT_LEN = 24


def fixture_specs():
    """(name, model class, config kwargs, stored dtype, expert layout, shards)."""
    from transformers import (MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM,
                              Qwen3MoeConfig, Qwen3MoeForCausalLM)
    return classic_specs(MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM,
                         Qwen3MoeConfig, Qwen3MoeForCausalLM) + hybrid_specs() + oss_specs()


COMMON = dict(vocab_size=1000, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)


def hybrid_specs():
    """Qwen3-Next and Qwen3.5/3.6-MoE: Gated DeltaNet layers + gated full attention, MoE with a
    sigmoid-gated shared expert, zero-centred (1 + w) RMSNorms, partial rotary. The prompt is
    longer than the delta rule's chunk (64) so the reference prefill spans two chunks."""
    import transformers as tr
    hybrid = dict(COMMON, head_dim=32, linear_conv_kernel_dim=4, linear_num_key_heads=2,
                  linear_num_value_heads=4, moe_intermediate_size=32,
                  shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
                  rope_theta=10000.0, rope_scaling={"partial_rotary_factor": 0.25},
                  prompt_len=80, zero_centred_norms=True, debug_dump=True)
    specs = []
    if hasattr(tr, "Qwen3NextForCausalLM"):
        specs.append(("qwen3_next", tr.Qwen3NextForCausalLM, tr.Qwen3NextConfig, dict(
            hybrid, num_hidden_layers=4, intermediate_size=96, linear_key_head_dim=16,
            linear_value_head_dim=24, decoder_sparse_step=1, mlp_only_layers=[1],
            norm_topk_prob=True,
            layer_types=["linear_attention", "linear_attention", "full_attention",
                         "linear_attention"]), torch.bfloat16, "per_expert", 1))
    else:
        print("transformers has no Qwen3NextForCausalLM: skipping qwen3_next")
    if hasattr(tr, "Qwen3_5MoeForCausalLM"):
        specs.append(("qwen3_5_moe", tr.Qwen3_5MoeForCausalLM, tr.Qwen3_5MoeTextConfig, dict(
            hybrid, num_hidden_layers=4, linear_key_head_dim=16, linear_value_head_dim=16,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention"], multimodal_wrapper=True),
            torch.bfloat16, "stacked", 1))
    else:
        print("transformers has no Qwen3_5MoeForCausalLM: skipping qwen3_5_moe")
    return specs


def oss_specs():
    """gpt-oss: alternating sliding-window (window 8 < prompt 24 + 16 decode) / full attention,
    sinks, q/k/v/o biases, YaRN (factor 32 over 4096, truncate false as the hub config), router
    and expert biases, clamped SwiGLU. gate_up_gain scales gate_up_proj so the clamp at
    swiglu_limit 7 bites. Written in the hub's bf16 layout (oss_hub_state)."""
    import transformers as tr
    if not hasattr(tr, "GptOssForCausalLM"):
        print("transformers has no GptOssForCausalLM: skipping gpt_oss")
        return []
    oss = dict(
        COMMON, max_position_embeddings=131072, num_hidden_layers=4, head_dim=16,
        intermediate_size=48, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention",
                     "full_attention"], attention_bias=True, swiglu_limit=7.0,
        rope_theta=150000.0,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "truncate": False, "original_max_position_embeddings": 4096},
        gate_up_gain=4.0, oss_layout=True)
    return [("gpt_oss", tr.GptOssForCausalLM, tr.GptOssConfig, oss, torch.bfloat16, "oss", 1),
            # The same shape with expert widths of whole 32-element blocks (I = 96; H = 64), its
            # experts MXFP4 as the hub ships gpt-oss (*_blocks / *_scales, oss_mxfp4_state).
            ("gpt_oss_mxfp4", tr.GptOssForCausalLM, tr.GptOssConfig,
             dict(oss, intermediate_size=96, mxfp4_experts=True), torch.bfloat16, "oss", 1)]


def oss_mlp_reference(x, rw, rb, gu, gub, dn, dnb, top_k, limit=7.0, alpha=1.702):
    """gpt-oss MoE from hub-layout tensors: gu [E, H, 2I] (gate even columns), dn [E, I, H]."""
    logits = x @ rw.T + rb
    val, idx = torch.topk(logits, top_k, dim=-1)
    w = torch.softmax(val, dim=-1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(top_k):
            e = int(idx[t, k])
            h = x[t] @ gu[e] + gub[e]
            g, u = h[::2].clamp(max=limit), h[1::2].clamp(-limit, limit)
            out[t] += w[t, k] * (((u + 1) * g * torch.sigmoid(alpha * g)) @ dn[e] + dnb[e])
    return out


def oss_hub_state(model, config):
    """The model's tensors under the hub's gpt-oss names and layout (mlp.router.{weight,bias},
    mlp.experts.gate_up_proj [E, H, 2I] interleaved + _bias [E, 2I], down_proj [E, I, H] +
    _bias [E, H]), whatever layout the installed transformers keeps them in: each candidate
    conversion is checked against the layer's own MLP output and the matching one is used."""
    E, H, I = config.num_local_experts, config.hidden_size, config.intermediate_size
    state = {k: v.detach().cpu().float().contiguous() for k, v in model.state_dict().items()}
    out = {k: v for k, v in state.items() if ".mlp." not in k}
    gen = torch.Generator().manual_seed(7)
    for li, layer in enumerate(model.model.layers):
        p = f"model.layers.{li}.mlp."
        mine = {k[len(p):]: v for k, v in state.items() if k.startswith(p)}
        rw = next(v for k, v in mine.items() if v.shape == (E, H) and "experts" not in k)
        rb = next(v for k, v in mine.items() if v.shape == (E,))
        gu_raw = next(v for k, v in mine.items() if v.dim() == 3 and 2 * I in v.shape[1:])
        dn_raw = next(v for k, v in mine.items() if v.dim() == 3 and 2 * I not in v.shape[1:])
        gub_raw = next(v for k, v in mine.items() if v.shape == (E, 2 * I))
        dnb = next(v for k, v in mine.items() if v.shape == (E, H) and "experts" in k)
        gu = gu_raw if gu_raw.shape[1] == H else gu_raw.transpose(1, 2)
        dn = dn_raw if dn_raw.shape[1] == I else dn_raw.transpose(1, 2)
        def interleave(t):  # [..., gate half | up half] -> [..., g0 u0 g1 u1 ...]
            return torch.stack([t[..., :I], t[..., I:]], dim=-1).reshape(*t.shape[:-1], 2 * I)
        x = torch.randn(5, H, generator=gen)
        dev = next(layer.parameters()).device
        with torch.no_grad():
            got = layer.mlp(x[None].to(dev))
        got = (got[0] if isinstance(got, tuple) else got)[0].float().cpu()
        chosen = None
        for name, (g, b) in {"interleaved": (gu, gub_raw),
                             "halves": (interleave(gu), interleave(gub_raw))}.items():
            ref = oss_mlp_reference(x, rw, rb, g, b, dn, dnb, config.num_experts_per_tok)
            err = (ref - got).abs().max().item() / got.abs().max().item()
            print(f"gpt_oss layer {li}: experts as {name}: max rel err {err:.2e}")
            if err < 1e-4:
                chosen = (g, b)
                break
        if chosen is None:
            raise RuntimeError("no expert layout candidate reproduces GptOssMLP")
        out[p + "router.weight"], out[p + "router.bias"] = rw, rb
        out[p + "experts.gate_up_proj"], out[p + "experts.gate_up_proj_bias"] = chosen
        out[p + "experts.down_proj"], out[p + "experts.down_proj_bias"] = dn.contiguous(), dnb
    return out


# OCP MX E2M1 codes 0..15 (bit 3 the sign), as transformers' integrations/mxfp4.py FP4_VALUES.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_quantize(x):
    """x [..., n] (n a multiple of 32) -> (codes [..., n] 0..15, scales [..., n/32] uint8 e8m0,
    dequantized [..., n]): per 32 elements the smallest power of two 2^e with max|x| / 2^e <= 6,
    each element the nearest E2M1 value of x / 2^e."""
    x = x.float()
    *lead, n = x.shape
    g = x.reshape(*lead, n // 32, 32)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.full_like(amax, -127.0))
    e = e.clamp(-127, 127)
    v = g / torch.exp2(e)[..., None]
    mags = torch.tensor(E2M1[:8])
    idx = (v.abs()[..., None] - mags).abs().argmin(-1)
    codes = idx + 8 * ((v < 0) & (idx > 0)).long()
    deq = torch.tensor(E2M1)[codes] * torch.exp2(e)[..., None]
    return (codes.reshape(*lead, n), (e + 127).to(torch.uint8),
            deq.reshape(*lead, n))


def mxfp4_round_experts(model, config):
    """Rounds every expert matrix in place to MXFP4 values along its input dimension (H for
    gate_up, I for down; 32-element blocks), whichever orientation transformers keeps them in,
    so the hub-layout blocks written later hold the model's weights exactly."""
    H, I = config.hidden_size, config.intermediate_size
    assert H % 32 == 0 and I % 32 == 0 and H != I and H != 2 * I, "ambiguous expert axes"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not (name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")):
                continue
            fan_in = H if name.endswith("gate_up_proj") else I
            axis = 1 if p.shape[1] == fan_in else 2
            t = p.detach().float().cpu().transpose(axis, 2)
            deq = mxfp4_quantize(t)[2].transpose(axis, 2)
            p.copy_(deq.to(p.dtype))


def mxfp4_pack(w):
    """w [E, rows, cols] of MXFP4 values -> hub (blocks [E, rows, cols/32, 16] uint8, element
    2j in the low nibble of byte j; scales [E, rows, cols/32] uint8)."""
    codes, scales, deq = mxfp4_quantize(w)
    assert torch.equal(deq, w.float()), "expert weights are not MXFP4 values"
    E, rows, cols = w.shape
    c = codes.reshape(E, rows, cols // 32, 16, 2)
    blocks = (c[..., 0] | (c[..., 1] << 4)).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous()


def mxfp4_unpack(blocks, scales):
    """The hub tensors back to [E, cols, rows] (x @ W) f32: transformers' own
    convert_moe_packed_tensors when it is installed (the checkpoint format's reference)."""
    try:
        from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    except Exception as e:  # ImportError, or the module's own optional imports
        print("transformers' integrations.mxfp4.convert_moe_packed_tensors unavailable "
              f"({e!r}): own unpack")
    else:
        return convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).float().cpu()
    lut = torch.tensor(E2M1)
    b = blocks.long()
    v = torch.stack([lut[b & 15], lut[b >> 4]], -1).reshape(*blocks.shape[:-1], 32)
    v = v * torch.exp2(scales.float() - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], -1).transpose(1, 2).contiguous()


def oss_mxfp4_state(state):
    """The hub bf16 expert tensors (gate_up_proj [E, H, 2I], down_proj [E, I, H], x @ W) as the
    MXFP4 checkpoints ship them: *_blocks / *_scales over the output rows (gate_up rows
    interleaved gate/up), each checked to unpack to the tensor it replaces."""
    out = {}
    for name, t in state.items():
        if not (name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")):
            out[name] = t
            continue
        blocks, scales = mxfp4_pack(t.float().transpose(1, 2).contiguous())
        back = mxfp4_unpack(blocks, scales)
        if back.shape != t.shape:
            raise RuntimeError(f"{name}: unpacked to {tuple(back.shape)}, not {tuple(t.shape)}")
        assert torch.equal(back, t.float()), f"{name}: MXFP4 blocks do not unpack to the weights"
        print(f"{name}: MXFP4 blocks {tuple(blocks.shape)} unpack exactly")
        out[name + "_blocks"], out[name + "_scales"] = blocks, scales
    return out


def classic_specs(MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM,
                  Qwen3MoeConfig, Qwen3MoeForCausalLM):
    common = dict(vocab_size=1000, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return [
        ("qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            common, num_hidden_layers=4, head_dim=32, intermediate_size=96,
            moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
            decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True,
            rope_theta=10000.0), torch.bfloat16, "per_expert", 1),
        ("qwen3_moe_yarn", Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
            common, num_hidden_layers=4, head_dim=16, intermediate_size=80,
            moe_intermediate_size=24, num_experts=6, num_experts_per_tok=3,
            decoder_sparse_step=2, mlp_only_layers=[], norm_topk_prob=False,
            attention_bias=True, rope_theta=50000.0,
            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 1024}),
         torch.bfloat16, "stacked", 2),
        ("mixtral", MixtralForCausalLM, MixtralConfig, dict(
            common, num_hidden_layers=3, head_dim=16, intermediate_size=48,
            num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
            rope_theta=1000000.0), torch.float16, "per_expert", 1),
        ("olmoe", OlmoeForCausalLM, OlmoeConfig, dict(
            common, num_hidden_layers=3, intermediate_size=32, num_experts=8,
            num_experts_per_tok=2, norm_topk_prob=False, rope_theta=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0}),
         torch.float32, "per_expert", 1),
    ]


FIXTURE_KEYS = ("prompt_len", "zero_centred_norms", "multimodal_wrapper", "debug_dump",
                "gate_up_gain", "oss_layout", "mxfp4_experts")


def make_config(config_cls, kwargs):
    kwargs = {k: v for k, v in kwargs.items() if k not in FIXTURE_KEYS}
    scaling = kwargs.pop("rope_scaling", None)
    theta = kwargs.pop("rope_theta")
    config = config_cls(**kwargs)
    params = {"rope_type": "default", "rope_theta": theta}
    if scaling:
        params.update(scaling)
    # transformers 5 keeps rope settings in rope_parameters; 4.x in rope_theta/rope_scaling.
    if hasattr(config, "rope_parameters"):
        config.rope_parameters = params
    else:
        config.rope_theta = theta
        config.rope_scaling = scaling
    config._attn_implementation = "eager"
    return config


def randomize(model, gen, dtype, zero_centred=False, gate_up_gain=1.0):
    """Random weights with unit-scale activations; norms ~1±0.3, biases ~0.1; rounded to dtype.

    zero_centred: the RMSNorms scale by (1 + w), so their w ~ ±0.3 (the gated DeltaNet output
    norm `linear_attn.norm` multiplies by w itself). DeltaNet decay parameters get values that
    keep a memory of several tokens: A = exp(A_log) in [0.05, 0.6], dt_bias ~ 0.5."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                v = torch.log(0.05 + 0.55 * torch.rand(p.shape, generator=gen))
            elif name.endswith("dt_bias"):
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif "norm" in name and zero_centred and "linear_attn.norm" not in name:
                v = 0.3 * torch.randn(p.shape, generator=gen)
            elif "norm" in name:
                v = 1.0 + 0.3 * torch.randn(p.shape, generator=gen)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(p.shape, generator=gen)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=gen)
            else:
                fan_in = p.shape[-1]
                v = torch.randn(p.shape, generator=gen) * (1.5 / math.sqrt(fan_in))
                if name.endswith("gate_up_proj"):  # gpt-oss: [E, H, 2I], fan-in H
                    v = torch.randn(p.shape, generator=gen) * (
                        1.5 * gate_up_gain / math.sqrt(min(p.shape[1:])))
            p.copy_(v.to(dtype).to(torch.float32))


def hub_state_dict(model, layout, family):
    """Names as checkpoints on the hub spell them: per-expert (legacy) or stacked 3-D experts.

    Accepts either layout from the installed transformers and writes the one asked for."""
    per_expert = {}
    for name, t in model.state_dict().items():
        per_expert.update(split_experts(name, t.detach().cpu().contiguous()))
    if family == "mixtral":  # the hub's Mixtral names
        renamed = {}
        for name, t in per_expert.items():
            name = name.replace(".mlp.", ".block_sparse_moe.")
            name = re.sub(r"experts\.(\d+)\.gate_proj", r"experts.\1.w1", name)
            name = re.sub(r"experts\.(\d+)\.down_proj", r"experts.\1.w2", name)
            name = re.sub(r"experts\.(\d+)\.up_proj", r"experts.\1.w3", name)
            renamed[name] = t
        per_expert = renamed
    return per_expert if layout == "per_expert" else stack_experts(per_expert)


def split_experts(name, t):
    if name.endswith("experts.gate_up_proj"):
        prefix, inter = name[: -len("gate_up_proj")], t.shape[1] // 2
        out = {}
        for e in range(t.shape[0]):
            out[f"{prefix}{e}.gate_proj.weight"] = t[e, :inter].clone()
            out[f"{prefix}{e}.up_proj.weight"] = t[e, inter:].clone()
        return out
    if name.endswith("experts.down_proj"):
        prefix = name[: -len("down_proj")]
        return {f"{prefix}{e}.down_proj.weight": t[e].clone() for e in range(t.shape[0])}
    return {name: t}


def stack_experts(state):
    """Per-expert -> transformers-5 stacked: gate_up_proj [E, 2I, H], down_proj [E, H, I]."""
    groups, out = {}, {}
    for name, t in state.items():
        m = re.match(r"(.*experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", name)
        if not m:
            out[name] = t
            continue
        groups.setdefault(m.group(1), {}).setdefault(m.group(3), {})[int(m.group(2))] = t
    for prefix, g in groups.items():
        n = len(g["gate_proj"])
        out[prefix + "gate_up_proj"] = torch.stack(
            [torch.cat([g["gate_proj"][e], g["up_proj"][e]]) for e in range(n)])
        out[prefix + "down_proj"] = torch.stack([g["down_proj"][e] for e in range(n)])
    return out


def wrap_multimodal(out_dir, text_config, state, gen):
    """Rewrites a text-only checkpoint the way the hub ships Qwen3.5/3.6 (image-text-to-text):
    config.json = {model_type: qwen3_5_moe, text_config: {...}, vision_config: {...}}, the
    language model under model.language_model.*, plus vision (model.visual.*) and MTP (mtp.*)
    tensors that a text-only engine skips. The text model's math is unchanged: for text-only
    input the conditional-generation model runs exactly this language model."""
    text = text_config.to_dict()
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                  num_position_embeddings=16)
    wrapped = None
    try:
        from transformers import Qwen3_5MoeConfig
        wrapped = Qwen3_5MoeConfig(text_config=text, vision_config=vision,
                                   tie_word_embeddings=False).to_dict()
    except Exception as e:  # keep going with a hand-written wrapper
        print("Qwen3_5MoeConfig(text_config=..., vision_config=...) failed:", repr(e))
    if wrapped is None or "text_config" not in wrapped:
        wrapped = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                   "model_type": "qwen3_5_moe", "text_config": text,
                   "vision_config": dict(vision, model_type="qwen3_5_moe_vision"),
                   "tie_word_embeddings": False}
    wrapped["architectures"] = ["Qwen3_5MoeForConditionalGeneration"]
    wrapped["transformers_version"] = transformers.__version__
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(wrapped, f, indent=2, sort_keys=True)
    out = {}
    for name, t in state.items():
        out[("model.language_model." + name[len("model."):]) if name.startswith("model.")
            else name] = t
    h = text_config.hidden_size
    out["model.visual.blocks.0.attn.qkv.weight"] = torch.randn(48, 16, generator=gen)
    out["model.visual.merger.linear_fc2.weight"] = torch.randn(h, 64, generator=gen)
    out["mtp.fc.weight"] = torch.randn(h, 2 * h, generator=gen)
    return out


def save_weights(state, out_dir, dtype, shards):
    state = {k: (v if v.dtype == torch.uint8 else v.to(dtype)).contiguous()  # MXFP4 stays U8
             for k, v in state.items()}
    names = sorted(state)
    if shards == 1:
        save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        return
    per = math.ceil(len(names) / shards)
    weight_map = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: state[k] for k in part}, os.path.join(out_dir, fname),
                  metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    total = sum(v.numel() * v.element_size() for v in state.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def bf16_kv_logits(model, ids):
    """Logits [L, V] of ids [1, L] with every layer's K (after rope) and V rounded to bf16."""
    import importlib
    mod = importlib.import_module(type(model.model.layers[0].self_attn).__module__)
    orig, calls = mod.apply_rotary_pos_emb, [0]

    def rounded(q, k, *args, **kwargs):
        q, k = orig(q, k, *args, **kwargs)
        calls[0] += 1
        return q, k.to(torch.bfloat16).to(k.dtype)

    def round_v(module, inp, out):
        return out.to(torch.bfloat16).to(out.dtype)

    hooks = [layer.self_attn.v_proj.register_forward_hook(round_v)
             for layer in model.model.layers]
    mod.apply_rotary_pos_emb = rounded
    try:
        with torch.no_grad():
            logits = model(ids).logits[0].float().cpu()
    finally:
        mod.apply_rotary_pos_emb = orig
        for h in hooks:
            h.remove()
    if calls[0] != len(model.model.layers):
        raise RuntimeError(f"apply_rotary_pos_emb ran {calls[0]} times, not once per layer: "
                           "the K rounding did not apply")
    return logits


def write_bf16_kv_reference(model, out_dir, prompt, greedy, prefill, decode_logits, device):
    """reference_bf16_kv.safetensors beside the f32 one (see the module docstring)."""
    T, N = prompt.shape[0], greedy.shape[0]
    seq = torch.cat([prompt, greedy[:N - 1]])[None].to(device)
    logits = bf16_kv_logits(model, seq)
    pre, dec = logits[:T].clone(), logits[T - 1:T - 1 + N].clone()  # own storage each
    d_pre = ((pre - prefill).abs().amax(-1) / prefill.abs().amax(-1)).max().item()
    d_dec = ((dec - decode_logits).abs().amax(-1) / decode_logits.abs().amax(-1)).max().item()
    print(f"{os.path.basename(out_dir)}: bf16 K/V vs f32 K/V logits, worst max|d|/max row: "
          f"prefill {d_pre:.3e}, decode {d_dec:.3e}")
    save_file({"prompt_ids": prompt.to(torch.int64), "greedy_ids": greedy.to(torch.int64),
               "prefill_logits": pre, "decode_logits": dec},
              os.path.join(out_dir, "reference_bf16_kv.safetensors"))


def add_bf16_kv_reference(fixture_dir, device):
    """For an existing fixture: load it with transformers (bf16 weights in the hub layout),
    check its f32 logits against reference.safetensors, then write the bf16-KV reference."""
    from safetensors.torch import load_file
    model = transformers.AutoModelForCausalLM.from_pretrained(
        fixture_dir, dtype=torch.float32, attn_implementation="eager").to(device).eval()
    ref = load_file(os.path.join(fixture_dir, "reference.safetensors"))
    prompt, greedy = ref["prompt_ids"], ref["greedy_ids"]
    with torch.no_grad():
        got = model(prompt[None].to(device)).logits[0].float().cpu()
    err = ((got - ref["prefill_logits"]).abs().amax(-1) /
           ref["prefill_logits"].abs().amax(-1)).max().item()
    print(f"{fixture_dir}: reloaded model vs reference.safetensors prefill: {err:.2e}")
    if err > 1e-4:
        raise RuntimeError(f"{fixture_dir}: the reloaded model does not reproduce the reference")
    write_bf16_kv_reference(model, fixture_dir, prompt, greedy, ref["prefill_logits"],
                            ref["decode_logits"], device)


def write_fixture(out_root, spec, device, seed):
    name, model_cls, config_cls, kwargs, dtype, layout, shards = spec
    prompt_len = kwargs.get("prompt_len", PROMPT_LEN)
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    config = make_config(config_cls, kwargs)
    model = model_cls(config).eval()
    randomize(model, gen, dtype, kwargs.get("zero_centred_norms", False),
              kwargs.get("gate_up_gain", 1.0))
    if kwargs.get("mxfp4_experts"):
        mxfp4_round_experts(model, config)
    config.save_pretrained(out_dir)
    if kwargs.get("oss_layout"):
        model = model.to(device)
        state = oss_hub_state(model, config)
        model = model.cpu()
    else:
        state = hub_state_dict(model, layout, config.model_type)
    if kwargs.get("mxfp4_experts"):  # the hub's MXFP4 gpt-oss: experts as blocks + scales
        state = oss_mxfp4_state(state)
        cfg_path = os.path.join(out_dir, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["quantization_config"] = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"]}
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
    if kwargs.get("multimodal_wrapper"):
        state = wrap_multimodal(out_dir, config, state, gen)
    save_weights(state, out_dir, dtype, shards)

    model = model.to(device)
    prompt = torch.randint(3, config.vocab_size, (prompt_len,), generator=gen)
    ids = prompt[None].to(device)
    debug, hooks = {}, []
    if kwargs.get("debug_dump"):  # per-layer mixer / MLP outputs of the prefill, for bisection
        for mname, module in model.named_modules():
            if re.search(r"layers\.\d+\.(linear_attn|self_attn|mlp)$", mname):
                def hook(mod, inp, out, mname=mname):
                    o = out[0] if isinstance(out, tuple) else out
                    debug[mname] = o[0].detach().float().cpu().contiguous()
                hooks.append(module.register_forward_hook(hook))
    with torch.no_grad():
        prefill = model(ids).logits[0].float().cpu()
    for h in hooks:
        h.remove()
    if debug:
        save_file(debug, os.path.join(out_root, f"{name}_debug.safetensors"))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             eos_token_id=None, pad_token_id=0)
    greedy = out.sequences[0, prompt_len:].cpu()
    decode_logits = torch.stack([s[0].float().cpu() for s in out.scores])
    save_file({"prompt_ids": prompt.to(torch.int64), "prefill_logits": prefill.contiguous(),
               "greedy_ids": greedy.to(torch.int64), "decode_logits": decode_logits.contiguous()},
              os.path.join(out_dir, "reference.safetensors"))
    meta = {"family": config.model_type, "torch": torch.__version__,
            "transformers": transformers.__version__, "stored_dtype": str(dtype),
            "expert_layout": layout, "shards": shards, "seed": seed, "device": device,
            "prompt_len": prompt_len, "n_greedy": N_GREEDY,
            "config_class": config_cls.__name__, "model_class": model_cls.__name__,
            "weight_names": sorted(state)[:12] + ["..."]}
    if kwargs.get("oss_layout"):  # sinks + sliding windows: the bf16 KV cache's reference
        write_bf16_kv_reference(model, out_dir, prompt, greedy, prefill, decode_logits, device)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"{name}: {sum(v.numel() for v in state.values())} params, greedy {greedy.tolist()}")


def main():
    out_root = sys.argv[1]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "--device" in sys.argv:
        device = sys.argv[sys.argv.index("--device") + 1]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print("torch", torch.__version__, "transformers", transformers.__version__, "device", device)
    if sys.argv[1] == "--bf16-kv-reference":
        add_bf16_kv_reference(sys.argv[2], device)
        return
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    failed = []
    for i, spec in enumerate(fixture_specs()):
        if only and spec[0] not in only:
            continue
        try:
            write_fixture(out_root, spec, device, seed=1234 + i)
        except Exception:  # report and continue with the other fixtures
            import traceback
            traceback.print_exc()
            failed.append(spec[0])
    if failed:
        print("FAILED fixtures:", failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
