"""Tiny random DeepSeek-V4 checkpoints in the real Hugging Face layout (docs/v4-model.md §2).

  write_tiny_v4(dir, dtype="fp8"|"bf16", seed=0) -> config dict
  /usr/bin/python3 tests/reference/v4_checkpoint.py --out DIR [--dtype fp8|bf16] [--seed 0]

"fp8": projections F8_E4M3 with F8_E8M0 (UE8M0) scales per 128x128 tile, routed experts FP4
e2m1 packed in I8 (low nibble first) with an F8_E8M0 scale per 32 inputs, norms / gate /
compressor / weights_proj / embed / head BF16, hyper-connection tensors, sinks, ape and gate
bias F32, tid2eid I64. "bf16": the same model with every FP8/FP4 tensor stored as its exact
BF16 value (decoded FP8/FP4 values are representable in BF16), so both checkpoints of one seed
compute the same function in exact arithmetic.

Shapes: hidden 256, 4 heads of 128 (64 rotary), q_lora 128, 2 output groups of rank 128,
window 8, compress_ratios [0, 4, 16, 4] + [0] for the MTP module (a window-only layer, an
indexed ratio-4 layer, a 128-kind layer with ratio 16, another ratio-4 layer), indexer 4 heads
of 128 picking 4 entries, 4 HC streams, 16 routed experts (top 4) of width 128 plus a shared
one, 1 hash-routed layer, vocab 512, one MTP module. About 6 MB.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import _STORAGE, f32_to_bf16_bits, f32_to_e4m3_bits, E4M3_TABLE, \
    write_checkpoint  # noqa: E402

_STORAGE.setdefault("F8_E8M0", np.uint8)

FP4_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])

TINY_CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "expert_dtype": "fp4",
    "hc_eps": 1e-06,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 256,
    "index_head_dim": 128,
    "index_n_heads": 4,
    "index_topk": 4,
    "initializer_range": 0.02,
    "max_position_embeddings": 4096,
    "moe_intermediate_size": 128,
    "n_routed_experts": 16,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 4,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 4,
    "num_hash_layers": 1,
    "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1,
    "o_groups": 2,
    "o_lora_rank": 128,
    "q_lora_rank": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16,
                     "original_max_position_embeddings": 65536, "type": "yarn"},
    "rope_theta": 10000,
    "routed_scaling_factor": 1.5,
    "scoring_func": "sqrtsoftplus",
    "sliding_window": 8,
    # Real models use 10; the tiny one's expert activations are O(1), so a smaller limit makes
    # the clamp actually act on some values.
    "swiglu_limit": 1.5,
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 512,
    "compress_rope_theta": 160000,
    "compress_ratios": [0, 4, 16, 4, 0],
}


def _ue8m0_pow2(amax, qmax):
    """Exponent e of the UE8M0 scale 2^e = 2^ceil(log2(amax / qmax))."""
    m, e = np.frexp(np.maximum(amax, 1e-30) / qmax)
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


def quant_fp8(w):
    """float [N, K] -> (e4m3 bytes, UE8M0 bytes [ceil(N/128), ceil(K/128)], dequantized)."""
    n, k = w.shape
    gn, gk = math.ceil(n / 128), math.ceil(k / 128)
    exps = np.zeros((gn, gk), dtype=np.int64)
    for i in range(gn):
        for j in range(gk):
            exps[i, j] = _ue8m0_pow2(np.abs(w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]).max(),
                                     448.0)
    s = np.ldexp(1.0, np.repeat(np.repeat(exps, 128, 0), 128, 1)[:n, :k])
    codes = f32_to_e4m3_bits(w / s)
    deq = E4M3_TABLE[codes] * s
    return codes, (exps + 127).astype(np.uint8), deq


def quant_fp4(w):
    """float [N, K] -> (packed I8 [N, K/2], UE8M0 bytes [N, K/32], dequantized)."""
    n, k = w.shape
    blocks = w.reshape(n, k // 32, 32)
    exps = _ue8m0_pow2(np.abs(blocks).max(-1), 6.0)                    # [N, K/32]
    v = np.clip(blocks / np.ldexp(1.0, exps)[..., None], -6, 6)
    a = np.abs(v)
    # nearest grid point, ties to the even code (codes 0..7 of FP4_GRID)
    d = np.abs(a[..., None] - FP4_GRID)
    best = d.min(-1, keepdims=True)
    cand = np.isclose(d, best, rtol=0, atol=1e-12)
    even_pref = cand & (np.arange(8) % 2 == 0)
    code = np.where(even_pref.any(-1), np.argmax(even_pref, -1), np.argmax(cand, -1))
    code = code + np.where((v < 0) & (code > 0), 8, 0)
    code = code.reshape(n, k).astype(np.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    table = np.concatenate((FP4_GRID, -FP4_GRID))
    deq = table[code] * np.repeat(np.ldexp(1.0, exps), 32, 1)
    return packed, (exps + 127).astype(np.uint8), deq


def write_tiny_v4(out_dir, dtype="fp8", seed=0, config=None):
    if dtype not in ("fp8", "bf16"):
        raise ValueError(f"dtype {dtype!r}: fp8 or bf16")
    c = dict(TINY_CONFIG if config is None else config)
    rng = np.random.default_rng(seed)
    D, H, Dh, Q = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, Ro, M = c["o_groups"], c["o_lora_rank"], c["hc_mult"]
    Hi, Di, E, F_ = c["index_n_heads"], c["index_head_dim"], c["n_routed_experts"], \
        c["moe_intermediate_size"]
    V, k, L = c["vocab_size"], c["num_experts_per_tok"], c["num_hidden_layers"]
    mix = (2 + M) * M
    t = {}

    def normal(shape, std):
        return rng.standard_normal(shape) * std

    def bf(name, arr):
        t[name] = ("BF16", f32_to_bf16_bits(arr))

    def f32(name, arr):
        t[name] = ("F32", np.asarray(arr, dtype=np.float32))

    def proj(name, out_f, in_f, std=None):
        w = normal((out_f, in_f), std if std is not None else in_f ** -0.5)
        codes, scale, deq = quant_fp8(w)
        if dtype == "fp8":
            t[name + ".weight"] = ("F8_E4M3", codes)
            t[name + ".scale"] = ("F8_E8M0", scale)
        else:
            bf(name + ".weight", deq)

    def expert(name, out_f, in_f):
        packed, scale, deq = quant_fp4(normal((out_f, in_f), in_f ** -0.5))
        if dtype == "fp8":
            t[name + ".weight"] = ("I8", packed)
            t[name + ".scale"] = ("F8_E8M0", scale)
        else:
            bf(name + ".weight", deq)

    def norm(name, n):
        bf(name, 1.0 + normal(n, 0.1))

    def compressor(p, ratio, d):
        cf = 2 if ratio == 4 else 1
        bf(p + ".wkv.weight", normal((cf * d, D), D ** -0.5))
        bf(p + ".wgate.weight", normal((cf * d, D), D ** -0.5))
        f32(p + ".ape", normal((ratio, cf * d), 0.5))
        norm(p + ".norm.weight", d)

    def layer(p, ratio, hashed):
        norm(p + ".attn_norm.weight", D)
        norm(p + ".ffn_norm.weight", D)
        for kind in ("attn", "ffn"):
            f32(f"{p}.hc_{kind}_fn", normal((mix, M * D), (M * D) ** -0.5))
            base = normal(mix, 0.5)
            base[2 * M:] += 2.0 * np.eye(M).ravel()        # streams mostly keep to themselves
            f32(f"{p}.hc_{kind}_base", base)
            f32(f"{p}.hc_{kind}_scale", 0.5 + rng.random(3))
        a = p + ".attn"
        proj(a + ".wq_a", Q, D)
        norm(a + ".q_norm.weight", Q)
        proj(a + ".wq_b", H * Dh, Q)
        proj(a + ".wkv", Dh, D)
        norm(a + ".kv_norm.weight", Dh)
        f32(a + ".attn_sink", normal(H, 1.0))
        proj(a + ".wo_a", G * Ro, H * Dh // G)
        proj(a + ".wo_b", D, G * Ro)
        if ratio:
            compressor(a + ".compressor", ratio, Dh)
        if ratio == 4:
            proj(a + ".indexer.wq_b", Hi * Di, Q)
            bf(a + ".indexer.weights_proj.weight", normal((Hi, D), D ** -0.5))
            compressor(a + ".indexer.compressor", 4, Di)
        f = p + ".ffn"
        bf(f + ".gate.weight", normal((E, D), D ** -0.5))
        if hashed:
            table = np.stack([rng.permutation(E)[:k] for _ in range(V)]).astype(np.int64)
            t[f + ".gate.tid2eid"] = ("I64", table)
        else:
            f32(f + ".gate.bias", normal(E, 0.1))
        for e in range(E):
            expert(f"{f}.experts.{e}.w1", F_, D)
            expert(f"{f}.experts.{e}.w2", D, F_)
            expert(f"{f}.experts.{e}.w3", F_, D)
        proj(f + ".shared_experts.w1", F_, D)
        proj(f + ".shared_experts.w2", D, F_)
        proj(f + ".shared_experts.w3", F_, D)

    bf("embed.weight", normal((V, D), 1.0))
    for l in range(L):
        layer(f"layers.{l}", c["compress_ratios"][l], l < c["num_hash_layers"])
    norm("norm.weight", D)
    bf("head.weight", normal((V, D), D ** -0.5))
    f32("hc_head_fn", normal((M, M * D), (M * D) ** -0.5))
    f32("hc_head_base", normal(M, 0.5))
    f32("hc_head_scale", [0.5 + rng.random()])
    for j in range(c["num_nextn_predict_layers"]):
        p = f"mtp.{j}"
        layer(p, c["compress_ratios"][L + j], False)
        proj(p + ".e_proj", D, D)
        proj(p + ".h_proj", D, D)
        norm(p + ".enorm.weight", D)
        norm(p + ".hnorm.weight", D)
        norm(p + ".norm.weight", D)
        f32(p + ".hc_head_fn", normal((M, M * D), (M * D) ** -0.5))
        f32(p + ".hc_head_base", normal(M, 0.5))
        f32(p + ".hc_head_scale", [0.5 + rng.random()])
    if dtype == "bf16":
        c.pop("quantization_config", None)
        c.pop("expert_dtype", None)
    os.makedirs(out_dir, exist_ok=True)
    write_checkpoint(out_dir, t)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=("fp8", "bf16"), default="fp8")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    write_tiny_v4(args.out, args.dtype, args.seed)


if __name__ == "__main__":
    main()
