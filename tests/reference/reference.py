"""Independent float64 PyTorch reference of the DeepSeek-V3 family forward pass.

Written from SPEC §2 and Hugging Face's DeepseekV3/V2 modeling semantics. Attention is
the expanded (plain MHA) form and every step recomputes the whole sequence without a
cache, so it shares nothing with the engine's absorbed/cached MLA.

  /usr/bin/python3 tests/reference/reference.py --model DIR --prompt-ids 1,2,3 \
      [--prompt-ids 4,5 ...] --max-tokens N --logits-out L.npy --tokens-out T.json \
      [--compute exact|fast] [--requant none|int8] \
      [--follow-routes TRACE [--follow-tokens T.json]] [--dense-attention]

Logits: float32 [num_sequences, N, vocab]; step 0 is at the last prompt position, step i
at the i-th generated token. Greedy: generated token i+1 = argmax(step i). No EOS stop.
stderr gets each sequence's smallest top-2 logit gap (relative to max|logit|): prompts
whose gap is near the comparison tolerance make token-equality checks flaky.

DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, a config with index_topk > 0; --dense-attention
ignores it and runs dense MLA, for comparisons). In every layer (MTP layers too) a lightning
indexer picks for each query t the positions s <= t that MLA attends. Written from
DeepSeek-V3.2-Exp's inference/model.py (class Indexer); Hi = index_n_heads, D = index_head_dim,
K = index_topk, R = qk_rope_head_dim. x_t is the attention input (after input_layernorm) and
qr_t = q_a_layernorm(q_a_proj(x_t)) the normed q latent that q_b_proj reads:
  1. q_t = wq_b(qr_t) viewed [Hi, D];  k_t = LayerNorm(wk(x_t)) (k_norm.weight, k_norm.bias,
     eps 1e-6: (v - mean) / sqrt(biased var + eps) * weight + bias).
  2. RoPE on the FIRST R values of each q head and of k, rotate-half (NeoX, non-interleaved):
     for i < R/2, y[i] = x[i] cos - x[i+R/2] sin, y[i+R/2] = x[i] sin + x[i+R/2] cos, with the
     cos/sin of MLA's RoPE (rope_cos_sin(): YaRN's inv_freq, times cs_mul). The last D - R values
     are not rotated. (MLA's q is [nope | pe] with adjacent pairs; here the roped part is first.)
  3. q_t[h] <- H q_t[h] / sqrt(D), k_t <- H k_t / sqrt(D); H the D x D Sylvester Hadamard matrix
     (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], natural order: H[i, j] = (-1)^popcount(i & j)).
  4. FP8 per block of 128 values (D/128 blocks per q head and per k): amax = max(max|v|, 1e-4),
     s = amax / 448, or s = 2^ceil(log2(amax / 448)) when quantization_config.scale_fmt is
     "ue8m0"; value = e4m3(clamp(v / s, -448, 448)), e4m3 = nearest float8 e4m3fn value, ties to
     even (e4m3_round). q_fp8[t, h], q_s[t, h]; k_fp8[s], k_s[s] (all in float64 here).
  5. w[t, h] = (x_t . weights_proj[h]) * Hi^-0.5 * q_s[t, h] * D^-0.5.
  6. score[t, s] = k_s[s] * sum_h w[t, h] * max(0, q_fp8[t, h] . k_fp8[s])  for s <= t.
     (D > 128: score[t, s] = sum_h (x_t . weights_proj[h]) Hi^-0.5 D^-0.5 *
      max(0, sum_b q_s[t, h, b] k_s[s, b] (q_fp8[t, h, b] . k_fp8[s, b])), blocks b of 128.)
  7. The min(K, t + 1) positions with the largest score are selected; equal scores are taken
     lower position first (the engine's rule too).
  8. MLA's softmax (the expanded form below) runs over the selected positions only.
The indexer's products (wq_b, wk, weights_proj) are exact float64 products whatever --compute
and --requant say, as the engine runs them (like the router: the indexer only ranks positions);
its input q latent is q_a_proj's, which those modes do change. Keys depend only on their own token, so recomputing the whole sequence every step gives
the cached engine's keys. stderr also gets, per sequence, the smallest gap between the K-th and
(K+1)-th index score of any query that had more than K positions (relative to that query's
max|score|): a near tie there can flip a selection between the engine and this reference.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import Checkpoint  # noqa: E402

DT = torch.float64


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_find_correction_dim(num_rotations, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_find_correction_range(low_rot, high_rot, dim, base, max_pos):
    low = math.floor(yarn_find_correction_dim(low_rot, dim, base, max_pos))
    high = math.ceil(yarn_find_correction_dim(high_rot, dim, base, max_pos))
    return max(low, 0), min(high, dim - 1)


def yarn_linear_ramp(low, high, n):
    if low == high:
        high += 0.001
    return torch.clamp((torch.arange(n, dtype=DT) - low) / (high - low), 0, 1)


def rope_params(cfg):
    """Returns (inv_freq [rope_dim/2], cos/sin multiplier, softmax scale)."""
    dim, base = cfg["qk_rope_head_dim"], float(cfg.get("rope_theta", 10000.0))
    freq_extra = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=DT) / dim))
    scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rs = cfg.get("rope_scaling")
    if not rs:
        return freq_extra, 1.0, scale
    kind = rs.get("type", rs.get("rope_type"))
    if kind != "yarn":
        raise ValueError(f"unsupported rope_scaling type {kind!r}")
    factor = float(rs["factor"])
    mscale, mscale_all = rs.get("mscale", 1), rs.get("mscale_all_dim", 0)
    low, high = yarn_find_correction_range(
        rs.get("beta_fast", 32), rs.get("beta_slow", 1), dim, base,
        rs.get("original_max_position_embeddings", 4096))
    mask = 1.0 - yarn_linear_ramp(low, high, dim // 2)
    inv_freq = (freq_extra / factor) * (1 - mask) + freq_extra * mask
    cs_mul = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all)
    if mscale_all:
        scale *= yarn_get_mscale(factor, mscale_all) ** 2
    return inv_freq, cs_mul, scale


def bf16(t):
    """float64 -> float32 -> bfloat16 (round to nearest even, as the kernels) -> float64."""
    return t.to(torch.float32).to(torch.bfloat16).to(DT)


# --requant int8: the engine's int8 requantization (LoadOptions::Requant::kInt8,
# src/kernels/matmul_i8.cc), which these functions reproduce bit for bit up to the order of the
# final float32 sum. An operand t [R, K] (a weight W [N, K] or an activation x [M, K]) is taken
# as float32 (the weight's exact value, FP8 byte times block scale rounded once to float32; the
# activation, float64 here, rounded to float32 as the engine holds it) and cut per row into
# blocks of 128 columns, the last one zero-padded past K. Per row and block:
#   s = float32(max|t|) / 127.0f                       (float32 division)
#   q = clamp(round_half_even(t / s), -127, 127)        (float32 division; all 0 when s == 0)
# and y = x @ W^T is y[m, n] = sum over blocks b in order of
#   float(sum_k q_x[m, b, k] q_w[n, b, k]) * (s_x[m, b] * s_w[n, b])      (scale product in f32)
# The integer block sums (|.| <= 128 * 127^2 < 2^24) and the scaled terms are exact in float64;
# the engine accumulates them with float32 FMAs, here they are summed in float64.
I8_BLOCK = 128


def quantize_i8(t):
    """t [R, K] (any float dtype) -> (q float64 [R, B, 128] of integers in [-127, 127],
    s float32 [R, B]); the engine's per-row, per-128-column-block int8 rule (above)."""
    t32 = t.to(torch.float32)
    rows, cols = t32.shape
    nb = -(-cols // I8_BLOCK)
    blocks = torch.zeros(rows, nb * I8_BLOCK, dtype=torch.float32)
    blocks[:, :cols] = t32
    blocks = blocks.view(rows, nb, I8_BLOCK)
    s = blocks.abs().amax(-1) / torch.tensor(127.0, dtype=torch.float32)
    zero = s == 0
    q = torch.round(blocks / torch.where(zero, torch.ones_like(s), s)[..., None])
    q = q.clamp(-127, 127).masked_fill(zero[..., None], 0)
    return q.to(DT), s


def i8_product(x, qw, sw):
    """x [M, K] @ W^T with W given as quantize_i8(W) = (qw, sw): the engine's int8 product."""
    qx, sx = quantize_i8(x)
    dots = torch.einsum("mbk,nbk->mnb", qx, qw)              # exact integers
    scale = (sx[:, None, :] * sw[None, :, :]).to(DT)         # float32 products
    return (dots * scale).sum(-1)


def apply_rope_adjacent(x, cos, sin):
    """x [T, ..., d]; pairs (2i, 2i+1) rotated by angle[t, i]. cos/sin [T, d/2]."""
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
    c, s = cos.reshape(shape), sin.reshape(shape)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


# DeepSeek Sparse Attention (module docstring, steps 1-7).
FP8_MAX = 448.0
FP8_BLOCK = 128


def apply_rope_halves(x, cos, sin):
    """x [T, ..., d]; pairs (i, i + d/2) rotated by angle[t, i] (rotate-half, the indexer's RoPE).
    cos/sin [T, d/2]."""
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
    c, s = cos.reshape(shape), sin.reshape(shape)
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)


def hadamard_matrix(d):
    """The d x d Sylvester Hadamard matrix (entries +-1, natural order); d a power of two."""
    if d < 1 or d & (d - 1):
        raise ValueError(f"Hadamard size {d} is not a power of two")
    h = torch.ones(1, 1, dtype=DT)
    while h.shape[0] < d:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


def hadamard_rotate(x):
    """x [..., d] -> H x / sqrt(d) on the last axis (fast_hadamard_transform with scale d^-0.5)."""
    d = x.shape[-1]
    return (x @ hadamard_matrix(d).T) * d ** -0.5


def e4m3_round(v):
    """float64 tensor -> the nearest float8 e4m3fn value (ties to even), saturated at +-448, as
    float64. Per binade [2^e, 2^(e+1)) (e >= -6; below, the subnormal step 2^-9) the values are
    multiples of 2^(e-3), so rounding v / 2^(e-3) to an integer (half to even: an even multiple
    is an even mantissa) is exact arithmetic; |v| <= 448 never rounds past 448 (= 14 * 2^5)."""
    a = v.abs().clamp(max=FP8_MAX)
    _, e = torch.frexp(a)                        # a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    step = torch.ldexp(torch.ones_like(a), (e - 1).clamp(min=-6) - 3)
    return torch.copysign(torch.round(a / step) * step, v)


def fp8_block_quant(v, ue8m0):
    """v [..., D] (D a multiple of 128) -> (e4m3 values [..., D] as float64, scales [..., D/128]):
    amax = max(max|block|, 1e-4); s = amax / 448, or with ue8m0 the power of two
    2^ceil(log2(amax / 448)); value = e4m3(clamp(v / s, -448, 448))."""
    d = v.shape[-1]
    if d % FP8_BLOCK:
        raise ValueError(f"index_head_dim {d} is not a multiple of {FP8_BLOCK}")
    blocks = v.reshape(v.shape[:-1] + (d // FP8_BLOCK, FP8_BLOCK))
    s = blocks.abs().amax(-1).clamp(min=1e-4) / FP8_MAX
    if ue8m0:
        m, e = torch.frexp(s)                    # s = m 2^e: ceil(log2 s) = e - 1 iff m == 0.5
        s = torch.ldexp(torch.ones_like(s), torch.where(m == 0.5, e - 1, e))
    q = e4m3_round((blocks / s[..., None]).clamp(-FP8_MAX, FP8_MAX))
    return q.reshape(v.shape), s


def index_scores(q8, qs, k8, ks, w):
    """Steps 5-6. q8 [T, Hi, D], qs [T, Hi, D/128], k8 [S, D], ks [S, D/128],
    w [T, Hi] = (x . weights_proj) * Hi^-0.5 -> score [T, S] (no causal mask)."""
    num_q, hi, d = q8.shape
    nb = d // FP8_BLOCK
    if nb == 1:  # D = 128: one scale per q head and per key, as DeepSeek's fp8_index
        wq = w * qs[..., 0] * d ** -0.5                          # step 5's w[t, h]
        dots = torch.einsum("thd,sd->tsh", q8, k8)
        return ks[None, :, 0] * (torch.relu(dots) * wq[:, None, :]).sum(-1)
    dots = torch.einsum("thbd,sbd->tshb", q8.view(num_q, hi, nb, FP8_BLOCK),
                        k8.view(-1, nb, FP8_BLOCK))
    dots = (dots * qs[:, None, :, :] * ks[None, :, None, :]).sum(-1)
    return (torch.relu(dots) * (w * d ** -0.5)[:, None, :]).sum(-1)


def select_top(scores, k):
    """Step 7. scores [T, T] (query t, position s; s > t ignored) -> (selected bool [T, T]:
    per query the min(k, t + 1) largest scores, equal scores lower position first;
    gaps {t: (score_k - score_k+1) / max|score| over s <= t} of the queries with > k positions)."""
    num_tokens = scores.shape[0]
    causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    masked = scores.masked_fill(causal, float("-inf"))
    # A stable descending sort keeps equal scores in position order; the masked -inf go last.
    vals, order = torch.sort(masked, dim=-1, descending=True, stable=True)
    selected = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
    gaps = {}
    for t in range(num_tokens):
        n = min(k, t + 1)
        selected[t, order[t, :n]] = True
        if t + 1 > k:
            top = float(scores[t, :t + 1].abs().max())
            gaps[t] = (float(vals[t, k - 1]) - float(vals[t, k])) / top if top > 0 else 0.0
    return selected, gaps


class Model:
    """Weights are read lazily from the checkpoint and kept as float64 tensors."""

    # follow_route(): the engine's routing of the sequence being computed ({position: [experts
    # of each MoE layer]}), and the gaps of the gate decisions it overrode.
    follow = None
    fast, requant = False, "none"
    # dense_attention: ignore a DSA indexer (--dense-attention). index_gaps: {(layer, position):
    # smallest selection gap (select_top) seen}, recorded when a dict.
    dense_attention, index_gaps = False, None

    # The weights --requant int8 requantizes (by name suffix; lm_head by its full name): every
    # projection the forward pass streams but kv_b_proj (W_uk/W_uv, which keeps the --compute
    # mode's numerics) and the MoE router (mlp.gate, exact like embeddings, norms and the bias).
    REQUANT_SUFFIXES = (".q_a_proj", ".q_b_proj", ".q_proj", ".kv_a_proj_with_mqa", ".o_proj",
                        ".gate_proj", ".up_proj", ".down_proj", ".eh_proj", ".shared_head.head")

    # cache_bytes: the most bytes of float64 weights kept (None: all). Past it a weight is
    # decoded again at each use, and the embeddings and LM head are read by rows (a real-shape
    # model's float64 weights are ~8x its FP8 checkpoint: more than a workstation holds).
    cache_bytes = None

    def __init__(self, model_dir, fast=False, requant="none", dense_attention=False,
                 cache_bytes=None):
        # fast: the engine's --compute fast numerics (docs/kernels.md, "Compute modes"): every
        # projection but the MoE router rounds its input and its weight (FP8 times scale, as
        # float32) to bfloat16 before an exact product.
        # requant "int8": the engine's --requant int8; the weights requantized() names are
        # multiplied as i8_product() (above) instead, in either compute mode; the rest (kv_b_proj,
        # the router) as the compute mode says.
        if requant not in ("none", "int8"):
            raise ValueError(f"unsupported requant {requant!r}")
        self.fast = fast
        self.requant = requant
        self.dense_attention = dense_attention
        self.index_gaps = {}
        self._i8 = {}
        self.tie_gaps = []
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.ckpt = Checkpoint(model_dir)
        self._w = {}
        self._cached = 0
        self.cache_bytes = cache_bytes
        if cache_bytes is not None and requant != "none":
            raise ValueError("a weight cache bound reads the LM head by rows: not with --requant")
        self.inv_freq, self.cs_mul, self.softmax_scale = rope_params(self.cfg)
        act = self.cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"unsupported hidden_act {act!r}")

    def w(self, name):
        if name in self._w:
            return self._w[name]
        t = torch.from_numpy(self.ckpt.get_f64(name))
        # Kept while the bound allows: the first weights read stay (a forward pass reads them
        # in the same order each time, which an evicting cache would turn into no hits at all).
        if self.cache_bytes is None or self._cached + t.numel() * 8 <= self.cache_bytes:
            self._w[name] = t
            self._cached += t.numel() * 8
        return t

    def embed(self, name, ids):
        """Rows `ids` of an embedding table (float64 [len(ids), hidden])."""
        if self.cache_bytes is None:
            return self.w(name)[torch.tensor(ids, dtype=torch.long)]
        return torch.cat([torch.from_numpy(self.ckpt.rows_f64(name, i, i + 1)) for i in ids])

    def head(self, x, name):
        """x @ W.T for an LM head `name` (no ".weight"), by blocks of rows past the cache bound."""
        if self.cache_bytes is None:
            return self.linear(x, name)
        full = name + ".weight"
        n = self.cfg["vocab_size"]
        step = 8192
        return torch.cat([self.product(x, torch.from_numpy(self.ckpt.rows_f64(full, r,
                                                                              min(n, r + step))))
                          for r in range(0, n, step)], dim=-1)

    def requantized(self, name):
        """Whether --requant int8 multiplies the projection `name` (no ".weight") as int8."""
        return name == "lm_head" or name.endswith(self.REQUANT_SUFFIXES)

    def linear(self, x, name):
        if self.requant == "int8":
            if self.requantized(name):
                if name not in self._i8:
                    self._i8[name] = quantize_i8(self.w(name + ".weight"))
                return i8_product(x, *self._i8[name])
            if not name.endswith(".kv_b_proj"):
                raise ValueError(f"{name}: neither requantized nor kv_b_proj")
        return self.product(x, self.w(name + ".weight"))

    def product(self, x, w):
        """x @ w.T, with both operands rounded to bfloat16 in fast mode."""
        if self.fast:
            return bf16(x) @ bf16(w).T
        return x @ w.T

    def rms(self, x, name):
        eps = self.cfg["rms_norm_eps"]
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * self.w(name + ".weight")

    def layer_norm(self, x, name, eps=1e-6):
        """LayerNorm over the last axis: (x - mean) / sqrt(biased variance + eps) * w + b."""
        xc = x - x.mean(-1, keepdim=True)
        var = (xc * xc).mean(-1, keepdim=True)
        return xc / torch.sqrt(var + eps) * self.w(name + ".weight") + self.w(name + ".bias")

    def rope_cos_sin(self, num_tokens):
        ang = torch.arange(num_tokens, dtype=DT)[:, None] * self.inv_freq[None, :]
        return torch.cos(ang) * self.cs_mul, torch.sin(ang) * self.cs_mul

    def q_latent(self, l, x):
        """qr = q_a_layernorm(q_a_proj(x)) [T, q_lora_rank]: what q_b_proj (and DSA's wq_b) read."""
        p = f"model.layers.{l}.self_attn"
        return self.rms(self.linear(x, p + ".q_a_proj"), p + ".q_a_layernorm")

    def index_topk(self):
        """DSA's K, or 0 for dense attention (no indexer in the config, or --dense-attention)."""
        return 0 if self.dense_attention else int(self.cfg.get("index_topk") or 0)

    def indexer_scores(self, l, x):
        """DSA's lightning indexer of layer l on the attention input x [T, hidden] (module
        docstring, steps 1-6): index scores [T, T] of query t for position s (s > t: -inf)."""
        c, p = self.cfg, f"model.layers.{l}.self_attn.indexer"
        num_tokens = x.shape[0]
        hi, d, rope = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"]
        if not c.get("q_lora_rank"):
            raise ValueError("DSA's indexer reads the q latent: q_lora_rank is needed")
        # 1. (exact products, whatever the compute mode: the engine's rule)
        q = (self.q_latent(l, x) @ self.w(p + ".wq_b.weight").T).view(num_tokens, hi, d)
        k = self.layer_norm(x @ self.w(p + ".wk.weight").T, p + ".k_norm")
        # 2. rotate-half RoPE on the first R values, MLA's cos/sin
        cos, sin = self.rope_cos_sin(num_tokens)
        q = torch.cat((apply_rope_halves(q[..., :rope], cos, sin), q[..., rope:]), -1)
        k = torch.cat((apply_rope_halves(k[:, :rope], cos, sin), k[:, rope:]), -1)
        # 3. Hadamard rotation; 4. FP8 per 128-block
        ue8m0 = (c.get("quantization_config") or {}).get("scale_fmt") == "ue8m0"
        q8, qs = fp8_block_quant(hadamard_rotate(q), ue8m0)
        k8, ks = fp8_block_quant(hadamard_rotate(k), ue8m0)
        # 5.-6. head weights (an exact float64 product; q_s and D^-0.5 in index_scores), scores
        w = (x @ self.w(p + ".weights_proj.weight").T) * hi ** -0.5
        causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
        return index_scores(q8, qs, k8, ks, w).masked_fill(causal, float("-inf"))

    def dsa_selected(self, l, x):
        """Step 7: bool [T, T], query t attends position s; records the selection gaps."""
        selected, gaps = select_top(self.indexer_scores(l, x), self.index_topk())
        if self.index_gaps is not None:
            for t, g in gaps.items():
                self.index_gaps[l, t] = min(g, self.index_gaps.get((l, t), g))
        return selected

    def mla_inputs(self, l, x):
        """Shared by the expanded form and by self_test's absorbed form.

        Returns q_nope [T,H,nope], q_pe [T,H,rope] (roped), c_kv [T,r] (normed),
        k_pe [T,rope] (roped).
        """
        c, p = self.cfg, f"model.layers.{l}.self_attn"
        num_tokens, nh = x.shape[0], c["num_attention_heads"]
        nope, rope = c["qk_nope_head_dim"], c["qk_rope_head_dim"]
        if c.get("q_lora_rank"):
            q = self.linear(self.q_latent(l, x), p + ".q_b_proj")
        else:
            q = self.linear(x, p + ".q_proj")
        q = q.view(num_tokens, nh, nope + rope)
        kv = self.linear(x, p + ".kv_a_proj_with_mqa")
        c_kv = self.rms(kv[:, :c["kv_lora_rank"]], p + ".kv_a_layernorm")
        cos, sin = self.rope_cos_sin(num_tokens)
        q_pe = apply_rope_adjacent(q[..., nope:], cos, sin)
        k_pe = apply_rope_adjacent(kv[:, c["kv_lora_rank"]:], cos, sin)
        return q[..., :nope], q_pe, c_kv, k_pe

    def attention(self, l, x):
        """Expanded MLA: c_kv -> per-head k_nope and v, then causal MHA."""
        c, p = self.cfg, f"model.layers.{l}.self_attn"
        num_tokens, nh = x.shape[0], c["num_attention_heads"]
        nope, vd = c["qk_nope_head_dim"], c["v_head_dim"]
        q_nope, q_pe, c_kv, k_pe = self.mla_inputs(l, x)
        kvb_w = self.w(p + ".kv_b_proj.weight")
        if self.fast:
            # The engine absorbs W_uk into the query: bf16(q_nope) @ bf16(W_uk) scored against
            # c_kv, which is this order of the same products: k_nope from the rounded W_uk, and
            # the rounded q_nope. v as below.
            w_uk = kvb_w.view(nh, nope + vd, -1)[:, :nope, :]
            k_nope = torch.einsum("tr,hdr->thd", c_kv, bf16(w_uk))
            q_nope = bf16(q_nope)
        else:
            kvb = self.linear(c_kv, p + ".kv_b_proj").view(num_tokens, nh, nope + vd)
            k_nope, v = kvb[..., :nope], kvb[..., nope:]
        q = torch.cat((q_nope, q_pe), -1)
        k = torch.cat((k_nope, k_pe[:, None, :].expand(-1, nh, -1)), -1)
        scores = torch.einsum("thd,shd->hts", q, k) * self.softmax_scale
        causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
        if self.index_topk():  # DSA: the softmax runs over the indexer's selection only
            causal = ~self.dsa_selected(l, x)
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        if self.fast:
            # The engine's order: the attention-weighted latent, then W_uv per head (rounded).
            o_lat = torch.einsum("hts,sr->thr", probs, c_kv)
            w_uv = kvb_w.view(nh, nope + vd, -1)[:, nope:, :]
            o = torch.einsum("thr,hdr->thd", bf16(o_lat), bf16(w_uv)).reshape(num_tokens, nh * vd)
        else:
            o = torch.einsum("hts,shd->thd", probs, v).reshape(num_tokens, nh * vd)
        return self.linear(o, p + ".o_proj")

    def mlp(self, x, prefix):
        gate = self.linear(x, prefix + ".gate_proj")
        return self.linear(torch.nn.functional.silu(gate) * self.linear(x, prefix + ".up_proj"),
                           prefix + ".down_proj")

    def route(self, l, x):
        """Returns (expert indices [T,k], weights [T,k]) of the MoE gate."""
        c, p = self.cfg, f"model.layers.{l}.mlp.gate"
        k, n_exp = c["num_experts_per_tok"], c["n_routed_experts"]
        n_group, topk_group = c.get("n_group") or 1, c.get("topk_group") or 1
        method, func = c.get("topk_method", "greedy"), c.get("scoring_func", "softmax")
        logits = x @ self.w(p + ".weight").T
        if func == "sigmoid":
            scores = torch.sigmoid(logits)
        elif func == "softmax":
            scores = torch.softmax(logits, dim=-1)
        else:
            raise ValueError(f"unsupported scoring_func {func!r}")
        if method == "greedy":
            idx = torch.topk(scores, k, dim=-1).indices
        elif method in ("noaux_tc", "group_limited_greedy"):
            if method == "noaux_tc":
                choice = scores + self.w(p + ".e_score_correction_bias")[None, :]
                grouped = choice.view(-1, n_group, n_exp // n_group)
                group_scores = grouped.topk(2, dim=-1).values.sum(-1)
            else:
                choice = scores
                group_scores = choice.view(-1, n_group, n_exp // n_group).max(-1).values
            keep = torch.topk(group_scores, topk_group, dim=-1).indices
            group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)
            expert_mask = group_mask.repeat_interleave(n_exp // n_group, dim=1)
            idx = torch.topk(choice.masked_fill(~expert_mask, float("-inf")), k, dim=-1).indices
        else:
            raise ValueError(f"unsupported topk_method {method!r}")
        if self.follow is not None:
            idx = self.follow_route(l, idx, scores if method == "greedy" else choice)
        weights = scores.gather(1, idx)
        # HF DeepseekV2/V3 normalize only when top_k > 1.
        if k > 1 and c.get("norm_topk_prob", False):
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return idx, weights * c.get("routed_scaling_factor", 1.0)

    def follow_route(self, l, idx, choice):
        """idx [T, k] with each token's experts replaced by the engine's (self.follow), where
        they differ recording the decision's gap: how far, relative to max|choice|, the
        reference's worst pick is above the engine's worst extra one (0 at an exact tie)."""
        layer = sum(1 for m in range(l) if self.is_moe_layer(m))
        idx = idx.clone()
        for t in range(idx.shape[0]):
            engine = self.follow.get(t)
            if engine is None:
                continue
            ours, theirs = set(idx[t].tolist()), set(engine[layer])
            if ours == theirs:
                continue
            row = choice[t]
            gap = (min(float(row[e]) for e in ours - theirs) -
                   max(float(row[e]) for e in theirs - ours)) / float(row.abs().max())
            self.tie_gaps.append((l, t, gap))
            idx[t] = torch.tensor(sorted(theirs), dtype=idx.dtype)
        return idx

    def moe(self, l, x):
        p = f"model.layers.{l}.mlp"
        idx, weights = self.route(l, x)
        y = torch.zeros_like(x)
        for e in torch.unique(idx).tolist():
            tok, slot = (idx == e).nonzero(as_tuple=True)
            y[tok] += weights[tok, slot][:, None] * self.mlp(x[tok], f"{p}.experts.{e}")
        if self.cfg.get("n_shared_experts"):
            y = y + self.mlp(x, p + ".shared_experts")
        return y

    def is_moe_layer(self, l):
        c = self.cfg
        return (c.get("n_routed_experts") is not None and l >= c.get("first_k_dense_replace", 0)
                and l % c.get("moe_layer_freq", 1) == 0)

    def layer(self, l, x):
        """Decoder layer l (an MTP module's block for l >= num_hidden_layers) on x [T, hidden]."""
        p = f"model.layers.{l}"
        h = x + self.attention(l, self.rms(x, p + ".input_layernorm"))
        hn = self.rms(h, p + ".post_attention_layernorm")
        return h + (self.moe(l, hn) if self.is_moe_layer(l) else self.mlp(hn, p + ".mlp"))

    def hidden(self, ids):
        """ids: list of token ids (positions 0..T-1) -> final-normed hidden states [T, hidden]."""
        x = self.embed("model.embed_tokens.weight", ids)
        for l in range(self.cfg["num_hidden_layers"]):
            x = self.layer(l, x)
        return self.rms(x, "model.norm")

    def forward(self, ids, last_only=False):
        """ids: list of token ids (positions 0..T-1) -> float64 logits [T, vocab] (last_only:
        [1, vocab], the last position's)."""
        h = self.hidden(ids)
        return self.head(h[-1:] if last_only else h, "lm_head")

    def mtp_logits(self, ids):
        """DeepSeek-V3's MTP module 0 (the layer after the last, HF names) over a sequence:
        at position i it reads the main model's final-normed hidden state h[i] and the token
        ids[i + 1]: eh_proj([enorm(embed(ids[i+1])) | hnorm(h[i])]) -> its decoder layer ->
        shared_head (norm, head). Returns float64 logits [T - 1, vocab] (row i predicts
        ids[i + 2])."""
        p = f"model.layers.{self.cfg['num_hidden_layers']}"
        h = self.hidden(ids[:-1])
        e = self.embed(p + ".embed_tokens.weight", ids[1:])
        x = self.linear(torch.cat((self.rms(e, p + ".enorm"), self.rms(h, p + ".hnorm")), -1),
                        p + ".eh_proj")
        x = self.layer(self.cfg["num_hidden_layers"], x)
        return self.head(self.rms(x, p + ".shared_head.norm"), p + ".shared_head.head")


def generate(model, prompt, max_tokens, engine_tokens=None):
    """Greedy decoding; returns (float64 logits [max_tokens, vocab], generated ids).
    engine_tokens: the engine's tokens of this sequence, whose routes model.follow holds: once the
    reference leaves them, the later positions hold other tokens and are no longer followed."""
    seq, steps, out = list(prompt), [], []
    for i in range(max_tokens):
        logits = model.forward(seq, last_only=True)[-1]
        tok = int(torch.argmax(logits))
        if (engine_tokens is not None and model.follow is not None and
                (i >= len(engine_tokens) or tok != engine_tokens[i])):
            model.follow = {p: v for p, v in model.follow.items() if p < len(seq)}
            engine_tokens = None
        steps.append(logits)
        out.append(tok)
        seq.append(tok)
    return torch.stack(steps), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json + safetensors)")
    ap.add_argument("--prompt-ids", action="append", required=True,
                    help="comma-separated token ids; repeat for more sequences")
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--logits-out", required=True, help=".npy, float32 [seqs, N, vocab]")
    ap.add_argument("--tokens-out", required=True, help='.json {"tokens": [[...], ...]}')
    ap.add_argument("--compute", choices=("exact", "fast"), default="exact",
                    help="fast: the engine's --compute fast rounding (see Model)")
    ap.add_argument("--requant", choices=("none", "int8"), default="none",
                    help="int8: the engine's --requant int8 products (see quantize_i8)")
    ap.add_argument("--follow-routes", default=None,
                    help="an engine trace (--trace-out) of the same prompts: route every token to the "
                         "experts the engine chose, and fail (exit 1) where that overrides a gate "
                         "decision by more than --route-tie-tol")
    ap.add_argument("--follow-tokens", default=None,
                    help="with --follow-routes: the engine's tokens of that run (--tokens-out); a "
                         "sequence that leaves them (a near tie, which compare.py bounds) is followed "
                         "only up to there")
    ap.add_argument("--route-tie-tol", type=float, default=2e-2,
                    help="largest gap/max|choice| of an overridden gate decision")
    ap.add_argument("--cache-gb", type=float, default=None,
                    help="keep at most this many GB of float64 weights (default: all); past it "
                         "weights are decoded at each use, embeddings and LM head read by rows "
                         "(for real-shape checkpoints)")
    ap.add_argument("--dense-attention", action="store_true",
                    help="ignore a DSA indexer (index_topk): dense MLA over all earlier positions")
    args = ap.parse_args(argv)
    if args.max_tokens < 1:
        ap.error("--max-tokens must be >= 1")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = Model(args.model, fast=args.compute == "fast", requant=args.requant,
                  dense_attention=args.dense_attention,
                  cache_bytes=None if args.cache_gb is None else int(args.cache_gb * 1e9))
    vocab = model.cfg["vocab_size"]
    prompts = [[int(t) for t in p.split(",") if t.strip()] for p in args.prompt_ids]
    for p in prompts:
        if not p or min(p) < 0 or max(p) >= vocab:
            ap.error(f"bad prompt {p} for vocab_size {vocab}")
    if args.follow_tokens and not args.follow_routes:
        ap.error("--follow-tokens needs --follow-routes")
    routes, engine_tokens = None, None
    if args.follow_routes:
        from routing_flips import read_trace
        routes = read_trace(args.follow_routes)
    if args.follow_tokens:
        with open(args.follow_tokens) as f:
            engine_tokens = json.load(f)["tokens"]
        if len(engine_tokens) != len(prompts):
            ap.error(f"--follow-tokens has {len(engine_tokens)} sequences, not {len(prompts)}")
    all_logits, all_tokens = [], []
    for p in prompts:
        s = len(all_tokens)
        if routes is not None:
            model.follow = {pos: layers for (seq, pos), layers in routes.items() if seq == s}
        model.index_gaps = {}
        logits, toks = generate(model, p, args.max_tokens,
                                engine_tokens[s] if engine_tokens is not None else None)
        all_logits.append(logits.numpy().astype(np.float32))
        all_tokens.append(toks)
        top2 = torch.topk(logits, 2, dim=-1).values
        gaps = (top2[:, 0] - top2[:, 1]) / logits.abs().max(-1).values
        print(f"sequence {len(all_tokens) - 1}: smallest top-2 gap/max|logit| "
              f"{float(gaps.min()):.2e} at step {int(gaps.argmin())}", file=sys.stderr)
        if model.index_topk():
            k = model.index_topk()
            if model.index_gaps:
                (l, t), g = min(model.index_gaps.items(), key=lambda kv: kv[1])
                print(f"sequence {len(all_tokens) - 1}: smallest index top-{k} gap "
                      f"(score_{k} - score_{k + 1})/max|score| {g:.2e} at layer {l} position {t} "
                      f"(of {len(model.index_gaps)} selections)", file=sys.stderr)
            else:
                print(f"sequence {len(all_tokens) - 1}: no index selection (no query has more "
                      f"than index_topk {k} positions: attention is dense)", file=sys.stderr)
    np.save(args.logits_out, np.stack(all_logits))
    with open(args.tokens_out, "w") as f:
        json.dump({"tokens": all_tokens}, f)
    if routes is not None:
        # Each position is routed again at every later step; report each decision once.
        gaps = {(l, t): g for l, t, g in model.tie_gaps}
        worst = max(gaps.values(), default=0.0)
        print(f"routing: followed the engine; it differs in {len(gaps)} gate decisions "
              f"(layer, position), largest gap/max|choice| {worst:.2e} (tol {args.route_tie_tol:g})",
              file=sys.stderr)
        if worst > args.route_tie_tol:
            print("FAIL: the engine's routing differs from the reference's beyond a near tie",
                  file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
