"""Writes a small deterministic random DeepSeek-V3-family checkpoint (HF layout).

  /usr/bin/python3 tests/reference/make_random_checkpoint.py --out DIR \
      [--preset v3|v32|v2lite|v2] [--dtype bf16|fp8] [--seed 0] [--shards 1] \
      [--layers N] [--mtp N] [--vocab N]

Every tensor is drawn from its own generator seeded by (seed, crc32(name)), so the
bytes depend only on the seed, the preset/overrides and the dtype. Linear weights are
N(0, 1/fan_in); norms 1 + N(0, 0.1^2). With --dtype fp8 every `*_proj.weight` under
model.layers (except eh_proj and the indexer's weights_proj) and the DSA indexer's wq_b and wk
are e4m3 with 128x128 `weight_scale_inv` tiles; the router gate, norms, embeddings, lm_head and
weights_proj stay bf16; e_score_correction_bias is F32, and so is the indexer's k_norm.bias
(N(0, 0.02^2)). --preset v32 is v3 plus DeepSeek-V3.2's sparse-attention indexer
(index_n_heads 8, index_head_dim 128, index_topk 16; with fp8, scale_fmt "ue8m0").
"""
import argparse
import json
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import block_quant_fp8, f32_to_bf16_bits, write_checkpoint  # noqa: E402

_BASE = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 192, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 4, "q_lora_rank": 96, "kv_lora_rank": 64,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 24,
    "intermediate_size": 320, "moe_intermediate_size": 96, "n_routed_experts": 16,
    "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8},
    "vocab_size": 512, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
    "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
    "attention_bias": False, "initializer_range": 0.02,
}

PRESETS = {
    "v3": {},
    "v32": {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
            "index_n_heads": 8, "index_head_dim": 128, "index_topk": 16},
    "v2lite": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
               "q_lora_rank": None, "topk_method": "greedy", "scoring_func": "softmax",
               "n_group": 1, "topk_group": 1, "norm_topk_prob": False,
               "routed_scaling_factor": 1.0, "n_shared_experts": 2, "num_experts_per_tok": 6,
               "num_nextn_predict_layers": 0,
               "rope_scaling": {"type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 64, "beta_fast": 32,
                                "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}},
    "v2": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
           "topk_method": "group_limited_greedy", "scoring_func": "softmax",
           "norm_topk_prob": False, "routed_scaling_factor": 4.0,
           "num_nextn_predict_layers": 0, "rope_scaling": None},
}


def make_config(preset, layers=None, mtp=None, vocab=None):
    cfg = json.loads(json.dumps({**_BASE, **PRESETS[preset]}))
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    if mtp is not None:
        cfg["num_nextn_predict_layers"] = mtp
    if vocab is not None:
        cfg["vocab_size"] = vocab
    return cfg


def tensor_shapes(cfg):
    """Ordered {name: (shape, kind)}; kind is 'linear', 'norm', 'embed', 'bias', 'norm_bias'."""
    c, out = cfg, {}
    hid, nh = c["hidden_size"], c["num_attention_heads"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    out["model.embed_tokens.weight"] = ((c["vocab_size"], hid), "embed")

    def mlp(p, width):
        out[p + ".gate_proj.weight"] = ((width, hid), "linear")
        out[p + ".up_proj.weight"] = ((width, hid), "linear")
        out[p + ".down_proj.weight"] = ((hid, width), "linear")

    def layer(l):
        p = f"model.layers.{l}"
        out[p + ".input_layernorm.weight"] = ((hid,), "norm")
        a = p + ".self_attn"
        if c["q_lora_rank"]:
            out[a + ".q_a_proj.weight"] = ((c["q_lora_rank"], hid), "linear")
            out[a + ".q_a_layernorm.weight"] = ((c["q_lora_rank"],), "norm")
            out[a + ".q_b_proj.weight"] = ((nh * (nope + rope), c["q_lora_rank"]), "linear")
        else:
            out[a + ".q_proj.weight"] = ((nh * (nope + rope), hid), "linear")
        out[a + ".kv_a_proj_with_mqa.weight"] = ((c["kv_lora_rank"] + rope, hid), "linear")
        out[a + ".kv_a_layernorm.weight"] = ((c["kv_lora_rank"],), "norm")
        out[a + ".kv_b_proj.weight"] = ((nh * (nope + vd), c["kv_lora_rank"]), "linear")
        out[a + ".o_proj.weight"] = ((hid, nh * vd), "linear")
        if c.get("index_topk"):  # DeepSeek-V3.2's DSA indexer
            ix, ihd = a + ".indexer", c["index_head_dim"]
            out[ix + ".wq_b.weight"] = ((c["index_n_heads"] * ihd, c["q_lora_rank"]), "linear")
            out[ix + ".wk.weight"] = ((ihd, hid), "linear")
            out[ix + ".k_norm.weight"] = ((ihd,), "norm")
            out[ix + ".k_norm.bias"] = ((ihd,), "norm_bias")
            out[ix + ".weights_proj.weight"] = ((c["index_n_heads"], hid), "linear")
        out[p + ".post_attention_layernorm.weight"] = ((hid,), "norm")
        if l < c["first_k_dense_replace"]:
            mlp(p + ".mlp", c["intermediate_size"])
            return
        out[p + ".mlp.gate.weight"] = ((c["n_routed_experts"], hid), "linear")
        if c["topk_method"] == "noaux_tc":
            out[p + ".mlp.gate.e_score_correction_bias"] = ((c["n_routed_experts"],), "bias")
        for e in range(c["n_routed_experts"]):
            mlp(f"{p}.mlp.experts.{e}", c["moe_intermediate_size"])
        if c["n_shared_experts"]:
            mlp(p + ".mlp.shared_experts", c["moe_intermediate_size"] * c["n_shared_experts"])

    for l in range(c["num_hidden_layers"]):
        layer(l)
    for l in range(c["num_hidden_layers"], c["num_hidden_layers"] + c["num_nextn_predict_layers"]):
        p = f"model.layers.{l}"
        out[p + ".embed_tokens.weight"] = ((c["vocab_size"], hid), "embed")
        out[p + ".enorm.weight"] = ((hid,), "norm")
        out[p + ".hnorm.weight"] = ((hid,), "norm")
        out[p + ".eh_proj.weight"] = ((hid, 2 * hid), "linear")
        layer(l)
        out[p + ".shared_head.norm.weight"] = ((hid,), "norm")
        out[p + ".shared_head.head.weight"] = ((c["vocab_size"], hid), "linear")
    out["model.norm.weight"] = ((hid,), "norm")
    out["lm_head.weight"] = ((c["vocab_size"], hid), "linear")
    return out


def random_value(name, shape, kind, seed):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if kind == "linear":
        return rng.standard_normal(shape) / np.sqrt(shape[-1])
    if kind == "norm":
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if kind == "bias":
        return 0.05 * rng.standard_normal(shape)
    if kind == "norm_bias":
        return 0.02 * rng.standard_normal(shape)
    return rng.standard_normal(shape)  # embed


def is_fp8(name):
    if not name.startswith("model.layers."):
        return False
    if name.endswith((".indexer.wq_b.weight", ".indexer.wk.weight")):
        return True
    return (name.endswith("_proj.weight")
            and not name.endswith(("eh_proj.weight", ".indexer.weights_proj.weight")))


def build_tensors(cfg, dtype, seed):
    """{name: (safetensors dtype, storage array)} for the whole checkpoint."""
    tensors = {}
    for name, (shape, kind) in tensor_shapes(cfg).items():
        value = random_value(name, shape, kind, seed)
        if kind in ("bias", "norm_bias"):
            tensors[name] = ("F32", value.astype(np.float32))
        elif dtype == "fp8" and is_fp8(name):
            bits, scale = block_quant_fp8(value)
            tensors[name] = ("F8_E4M3", bits)
            tensors[name + "_scale_inv"] = ("F32", scale)
        else:
            tensors[name] = ("BF16", f32_to_bf16_bits(value))
    return tensors


def write_random_checkpoint(out_dir, preset="v3", dtype="bf16", seed=0, shards=1,
                            layers=None, mtp=None, vocab=None):
    cfg = make_config(preset, layers, mtp, vocab)
    cfg["torch_dtype"] = "bfloat16"
    if dtype == "fp8":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                      "quant_method": "fp8", "weight_block_size": [128, 128]}
        if cfg.get("index_topk"):  # DeepSeek-V3.2's: power-of-two activation scales
            cfg["quantization_config"]["scale_fmt"] = "ue8m0"
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_checkpoint(out_dir, build_tensors(cfg, dtype, seed), num_shards=shards)
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="v3")
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--layers", type=int, help="num_hidden_layers override")
    ap.add_argument("--mtp", type=int, help="num_nextn_predict_layers override")
    ap.add_argument("--vocab", type=int, help="vocab_size override")
    a = ap.parse_args(argv)
    write_random_checkpoint(a.out, a.preset, a.dtype, a.seed, a.shards, a.layers, a.mtp, a.vocab)


if __name__ == "__main__":
    main()
