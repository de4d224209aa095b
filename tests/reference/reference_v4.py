"""Independent float64 PyTorch reference of the DeepSeek-V4 forward pass (V4-Flash, V4-Pro).

Written from docs/v4-model.md (the equations restated from DeepSeek's V4 inference code), not
from DeepSeek's model.py. Every step recomputes the whole sequence from the token ids with no
cache: the window, the compressed entries (per-group gated pooling), the indexer's choice, the
hyper-connection streams and the MoE are all recomputed, so nothing is shared with an engine's
incremental per-sequence state.

  /usr/bin/python3 tests/reference/reference_v4.py --model DIR --prompt-ids 1,2,3 \
      [--prompt-ids 4,5 ...] --max-tokens N --logits-out L.npy --tokens-out T.json \
      [--numerics exact|deepseek] [--mtp-logits-out M.npy] [--cache-gb G]

Logits: float32 [num_sequences, N, vocab]; step 0 is at the last prompt position, step i at
the i-th generated token. Greedy (argmax; no EOS stop). stderr gets each sequence's smallest
top-2 logit gap relative to max|logit|, and the smallest indexer top-K gap.

Checkpoint: the Hugging Face V4 layout (docs/v4-model.md §2): `<m>.weight` F8_E4M3 with
`<m>.scale` F8_E8M0 per 128x128 tile; routed experts I8 (FP4 e2m1, two per byte, low nibble
first) with `<m>.scale` F8_E8M0 per 32 inputs; BF16, F32, I64 as stored. All are decoded
exactly to float64.

--numerics exact (default): float64 everywhere, plus the model's own quantization steps
(FP8 simulation q8_64 of the non-rotary KV dims and of the attention compressor's entries;
Hadamard rotation and FP4 simulation q4 of the indexer's queries and keys).
--numerics deepseek: also DeepSeek's run's storage roundings to bfloat16 (docs/v4-model.md
§10) and the FP8 (q8_128) quantization of the input of every FP8/FP4-weight projection, with
float32 RoPE angles; the sparse-attention kernel's bf16 rounding of the softmax numerators is
done as for one block (exact for up to 64 attended entries).

--cache-gb G (as reference.py's, for real-shape checkpoints, whose float64 weights are ~8x
the FP8 checkpoint and ~16x its FP4 experts): at most G GB of decoded float64 weights are kept,
the first ones read (a forward pass reads them in the same order each time, which an evicting
cache would turn into no hits); past the bound a weight is decoded again at each use. Routed
experts are never kept (decoded at each use: they are the bulk, and a pass uses a few of each
layer's), the embedding is read by the rows of the token ids and the LM head by blocks of
rows. The same numbers as without the bound (v4_self_test.py checks it); without the flag
every weight is kept.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from safetensors_io import Checkpoint  # noqa: E402
from reference import bf16, e4m3_round, generate, hadamard_matrix  # noqa: E402

DT = torch.float64
FP8_MAX = 448.0
FP4_MAX = 6.0
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# UE8M0 scales are one byte each; the shared reader keeps them as their bytes.
safetensors_io._STORAGE.setdefault("F8_E8M0", np.uint8)


def ue8m0_value(b):
    """UE8M0 bytes -> float64 2^(b - 127) (255 is NaN)."""
    b = np.asarray(b, dtype=np.int64)
    out = np.ldexp(1.0, b - 127)
    return np.where(b == 255, np.nan, out)


# byte -> (low nibble's value, high nibble's), one complex128 per byte: a single np.take per byte
# (a real-shape reference decodes every routed expert it uses at each use).
_FP4_PAIRS = np.array([[FP4_VALUES[b & 0x0F], FP4_VALUES[b >> 4]] for b in range(256)],
                      dtype=np.float64).view(np.complex128).reshape(256)


def fp4_unpack(packed, scale, block=32):
    """I8 [out, in/2] packed e2m1 (input 2j in the low nibble of byte j, 2j+1 in the high one)
    and UE8M0 [out, in/block] -> float64 [out, in]."""
    u = np.asarray(packed).view(np.uint8)
    vals = np.take(_FP4_PAIRS, u).view(np.float64).reshape(u.shape[0], -1)
    s = ue8m0_value(scale)
    n = vals.shape[1]
    if n == s.shape[1] * block:   # whole blocks: the scale broadcast in place
        vals.reshape(u.shape[0], -1, block)[...] *= s[:, :, None]
        return vals
    return vals * np.repeat(s, block, axis=1)[:, :n]


class V4Checkpoint(Checkpoint):
    """The shared lazy safetensors reader plus V4's `.scale` companions (UE8M0)."""

    def get_f64(self, name):
        dt = self.dtype(name)
        if dt in ("F8_E4M3", "I8") and name.endswith(".weight"):
            sname = name[:-len("weight")] + "scale"
            if not self.has(sname):
                raise KeyError(f"{name} ({dt}) has no {sname}")
            if self.dtype(sname) != "F8_E8M0":
                raise ValueError(f"{sname}: scale dtype {self.dtype(sname)}, expected F8_E8M0")
            scale = self.get(sname)
            if dt == "I8":
                return fp4_unpack(self.get(name), scale)
            vals = self.get(name).astype(np.float64)
            s = np.repeat(np.repeat(ue8m0_value(scale), 128, axis=0), 128, axis=1)
            return vals * s[:vals.shape[0], :vals.shape[1]]
        if dt in ("I64", "I32", "I16", "I8", "U8"):
            return self.get(name).astype(np.int64)
        return self.get(name).astype(np.float64)


def pow2_ceil(x):
    """2^ceil(log2 x) for x > 0 (exactly, via frexp)."""
    m, e = torch.frexp(x)                      # x = m 2^e, m in [0.5, 1)
    return torch.ldexp(torch.ones_like(x), torch.where(m == 0.5, e - 1, e))


def e2m1_round(v):
    """Nearest FP4 e2m1 value (ties to even mantissa), |v| <= 6 assumed: steps of 0.5 below 2,
    1 in [2, 4), 2 in [4, 6]; the step is 2^(max(floor(log2|v|), 0) - 1)."""
    a = v.abs()
    _, e = torch.frexp(a)                      # floor(log2 a) = e - 1 (a > 0)
    step = torch.ldexp(torch.ones_like(a), (e - 1).clamp(min=0) - 1)
    return torch.copysign(torch.round(a / step) * step, v)


def q8(v, block):
    """FP8 simulation per `block` values: amax = max(max|v|, 1e-4), s = 2^ceil(log2(amax/448)),
    value = e4m3(clamp(v / s, -448, 448)) * s (DeepSeek's act_quant, ue8m0)."""
    sh = v.shape
    b = v.reshape(sh[:-1] + (sh[-1] // block, block))
    s = pow2_ceil(b.abs().amax(-1, keepdim=True).clamp(min=1e-4) / FP8_MAX)
    return (e4m3_round((b / s).clamp(-FP8_MAX, FP8_MAX)) * s).reshape(sh)


def q4(v, block=32):
    """FP4 simulation per 32 values: amax = max(max|v|, 6 * 2^-126), s = 2^ceil(log2(amax/6)),
    value = e2m1(clamp(v / s, -6, 6)) * s (DeepSeek's fp4_act_quant)."""
    sh = v.shape
    b = v.reshape(sh[:-1] + (sh[-1] // block, block))
    s = pow2_ceil(b.abs().amax(-1, keepdim=True).clamp(min=FP4_MAX * 2.0 ** -126) / FP4_MAX)
    return (e2m1_round((b / s).clamp(-FP4_MAX, FP4_MAX)) * s).reshape(sh)


def sinkhorn_split(m, scale, base, hc, iters, eps):
    """docs/v4-model.md §6.1. m [T, (2+hc)hc] -> pre [T, hc], post [T, hc], comb [T, hc, hc]
    (comb[t, j, k]: from stream j to stream k)."""
    pre = torch.sigmoid(m[:, :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).view(-1, hc, hc)
    comb = torch.softmax(comb, -1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


def yarn_freqs(rope_dim, base, factor, orig, beta_fast, beta_slow, dtype=DT):
    """RoPE frequencies f_i = base^(-2i/R), YaRN-interpolated when orig > 0 (§5.1)."""
    f = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=dtype) / rope_dim))
    if orig > 0:
        def corr(rot):
            return rope_dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr(beta_fast)), 0)
        high = min(math.ceil(corr(beta_slow)), rope_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(rope_dim // 2, dtype=dtype) - low) / (high - low)).clamp(0, 1)
        f = f / factor * ramp + f * (1 - ramp)
    return f


def rope(x, ang, inverse=False):
    """Interleaved RoPE of x [T, ..., R] (pairs (2i, 2i+1)) by angles ang [T, R/2]."""
    shape = (ang.shape[0],) + (1,) * (x.dim() - 2) + (ang.shape[1],)
    c, s = torch.cos(ang).view(shape), torch.sin(ang).view(shape)
    if inverse:
        s = -s
    re, im = x[..., 0::2], x[..., 1::2]
    return torch.stack((re * c - im * s, re * s + im * c), -1).flatten(-2)


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)

    def get(hf, alt=None, default=None):
        if hf in raw:
            return raw[hf]
        if alt is not None and alt in raw:
            return raw[alt]
        if default is None:
            raise KeyError(f"config.json: missing {hf}")
        return default
    rs = raw.get("rope_scaling") or {}
    c = {
        "vocab": get("vocab_size"), "dim": get("hidden_size", "dim"),
        "layers": get("num_hidden_layers", "n_layers"),
        "mtp": get("num_nextn_predict_layers", "n_mtp_layers", 0),
        "heads": get("num_attention_heads", "n_heads"), "head_dim": get("head_dim"),
        "rope_dim": get("qk_rope_head_dim", "rope_head_dim"),
        "q_lora": get("q_lora_rank"), "o_groups": get("o_groups"),
        "o_lora": get("o_lora_rank"), "window": get("sliding_window", "window_size"),
        "ratios": list(get("compress_ratios")),
        "compress_theta": float(get("compress_rope_theta")),
        "rope_theta": float(get("rope_theta", default=10000.0)),
        "rope_factor": float(rs.get("factor", raw.get("rope_factor", 1.0))),
        "orig_len": int(rs.get("original_max_position_embeddings",
                               raw.get("original_seq_len", 0))),
        "beta_fast": float(rs.get("beta_fast", raw.get("beta_fast", 32))),
        "beta_slow": float(rs.get("beta_slow", raw.get("beta_slow", 1))),
        "index_heads": get("index_n_heads"), "index_dim": get("index_head_dim"),
        "index_topk": get("index_topk"), "hc": get("hc_mult"),
        "hc_iters": get("hc_sinkhorn_iters"), "hc_eps": float(get("hc_eps", default=1e-6)),
        "eps": float(get("rms_norm_eps", "norm_eps", 1e-6)),
        "experts": get("n_routed_experts"), "topk": get("num_experts_per_tok",
                                                        "n_activated_experts"),
        "inter": get("moe_intermediate_size", "moe_inter_dim"),
        "hash_layers": get("num_hash_layers", "n_hash_layers", 0),
        "route_scale": float(get("routed_scaling_factor", "route_scale", 1.0)),
        "swiglu_limit": float(get("swiglu_limit", default=0.0)),
        "score_func": get("scoring_func", "score_func", "sqrtsoftplus"),
    }
    if c["score_func"] != "sqrtsoftplus":
        raise ValueError(f"scoring_func {c['score_func']!r}: V4 uses sqrtsoftplus")
    if len(c["ratios"]) < c["layers"] + c["mtp"]:
        raise ValueError("compress_ratios has fewer entries than layers + MTP layers")
    return c


class ModelV4:
    # cache_bytes: the most bytes of float64 weights kept (None: all; module docstring).
    cache_bytes = None
    HEAD_ROWS = 8192          # LM head rows decoded at a time past the bound

    def __init__(self, model_dir, numerics="exact", cache_bytes=None):
        if numerics not in ("exact", "deepseek"):
            raise ValueError(numerics)
        self.ds = numerics == "deepseek"
        self.ck = V4Checkpoint(model_dir)
        self.c = read_config(model_dir)
        self._w = {}
        self.cache_bytes = cache_bytes
        self._cached = 0
        self._freqs = {}
        self.index_gaps = {}

    # --- weights and primitive ops ------------------------------------------------------
    def w(self, name):
        if name in self._w:
            return self._w[name]
        t = torch.from_numpy(np.ascontiguousarray(self.ck.get_f64(name)))
        if self.cache_bytes is None or (".experts." not in name and
                                        self._cached + t.numel() * 8 <= self.cache_bytes):
            self._w[name] = t
            self._cached += t.numel() * 8
        return t

    def embed(self, ids):
        """Rows `ids` of embed.weight (float64 [len(ids), D]); by rows past a bound."""
        if self.cache_bytes is None:
            return self.w("embed.weight")[torch.as_tensor(ids)]
        return torch.cat([torch.from_numpy(self.ck.rows_f64("embed.weight", i, i + 1))
                          for i in ids])

    def head(self, x):
        """x @ head.weight^T; by blocks of HEAD_ROWS rows past a bound."""
        if self.cache_bytes is None:
            return x @ self.w("head.weight").T
        n, step = self.c["vocab"], self.HEAD_ROWS
        return torch.cat([x @ torch.from_numpy(self.ck.rows_f64("head.weight", r,
                                                                min(n, r + step))).T
                          for r in range(0, n, step)], -1)

    def quantized(self, name):
        return self.ck.dtype(name) in ("F8_E4M3", "I8")

    def rb(self, x):
        """A bf16 storage point of DeepSeek's run (identity in exact mode)."""
        return bf16(x) if self.ds else x

    def lin(self, x, prefix):
        """Projection by `<prefix>.weight`; in deepseek mode FP8/FP4 weights see a q8_128 input
        and the output is stored bf16 (as is a BF16 weight's)."""
        name = prefix + ".weight"
        if self.ds and self.quantized(name):
            x = q8(x, 128)
        return self.rb(x @ self.w(name).T)

    def rms(self, x, prefix):
        v = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["eps"])
        return self.rb(v * self.w(prefix + ".weight"))

    def angles(self, compressed, positions):
        """[len(positions), R/2] RoPE angles of a layer kind (§5.1)."""
        c = self.c
        key = bool(compressed)
        if key not in self._freqs:
            dtype = torch.float32 if self.ds else DT
            if compressed:
                f = yarn_freqs(c["rope_dim"], c["compress_theta"], c["rope_factor"],
                               c["orig_len"], c["beta_fast"], c["beta_slow"], dtype)
            else:
                f = yarn_freqs(c["rope_dim"], c["rope_theta"], 1.0, 0, 0, 0, dtype)
            self._freqs[key] = f
        f = self._freqs[key]
        pos = torch.as_tensor(positions, dtype=f.dtype)
        return torch.outer(pos, f).to(DT)

    def rope_last(self, x, ang, inverse=False):
        r = self.c["rope_dim"]
        return torch.cat((x[..., :-r], self.rb(rope(x[..., -r:], ang, inverse))), -1)

    # --- compressor and indexer (§5.3, §5.4) ---------------------------------------------
    def compress(self, a, prefix, ratio, d, rotate):
        """a [T, D] -> the complete groups' entries [T // ratio, d]."""
        T = a.shape[0]
        n = T // ratio
        if n == 0:
            return a.new_zeros(0, d)
        kappa = a @ self.w(prefix + ".wkv.weight").T
        sigma = a @ self.w(prefix + ".wgate.weight").T
        ape = self.w(prefix + ".ape")
        kappa = kappa[:n * ratio].view(n, ratio, -1)
        sigma = sigma[:n * ratio].view(n, ratio, -1) + ape
        if ratio == 4:
            # entry i: first-half channels of group i-1's tokens, second half of group i's
            prev_k = torch.cat((kappa.new_zeros(1, ratio, d), kappa[:-1, :, :d]), 0)
            prev_s = torch.cat((sigma.new_full((1, ratio, d), -math.inf), sigma[:-1, :, :d]), 0)
            kappa = torch.cat((prev_k, kappa[:, :, d:]), 1)
            sigma = torch.cat((prev_s, sigma[:, :, d:]), 1)
        pooled = (kappa * torch.softmax(sigma, 1)).sum(1)
        e = self.rms(self.rb(pooled), prefix + ".norm")
        e = self.rope_last(e, self.angles(True, [i * ratio for i in range(n)]))
        if rotate:
            e = self.rb(e @ hadamard_matrix(d).T * d ** -0.5)
            return q4(e)
        r = self.c["rope_dim"]
        return torch.cat((q8(e[:, :-r], 64), e[:, -r:]), -1)

    def indexer(self, l, a, qlat):
        """Ratio-4 layer l: bool [T, T // 4], the entries each query attends."""
        c, p = self.c, f"{self.lp(l)}.attn.indexer"
        T, hi, di = a.shape[0], c["index_heads"], c["index_dim"]
        keys = self.compress(a, p + ".compressor", 4, di, True)
        n = keys.shape[0]
        q = self.lin(qlat, p + ".wq_b").view(T, hi, di)
        q = self.rope_last(q, self.angles(True, range(T)))
        q = q4(self.rb(q @ hadamard_matrix(di).T * di ** -0.5))
        wts = self.rb(self.lin(a, p + ".weights_proj") * (di ** -0.5 * hi ** -0.5))
        dots = self.rb(torch.einsum("thd,nd->thn", q, keys))
        score = self.rb((torch.relu(dots) * wts[:, :, None]).sum(1))          # [T, n]
        sel = torch.zeros(T, n, dtype=torch.bool)
        k = c["index_topk"]
        for t in range(T):
            valid = (t + 1) // 4
            if valid == 0:
                continue
            s = score[t, :valid]
            # largest first, equal scores lower entry first
            order = sorted(range(valid), key=lambda i: (-float(s[i]), i))
            sel[t, order[:k]] = True
            if valid > k:
                top = float(s[order[k - 1]]) - float(s[order[k]])
                scale = float(s.abs().max()) or 1.0
                self.index_gaps[(l, t)] = top / scale
        return sel

    # --- attention (§5) ---------------------------------------------------------------
    def lp(self, l):
        return f"layers.{l}" if l < self.c["layers"] else f"mtp.{l - self.c['layers']}"

    def attention(self, l, a):
        c, p = self.c, self.lp(l) + ".attn"
        T, H, dh, r = a.shape[0], c["heads"], c["head_dim"], c["rope_dim"]
        ratio = c["ratios"][l]
        ang = self.angles(ratio != 0, range(T))
        qlat = self.rms(self.lin(a, p + ".wq_a"), p + ".q_norm")
        q = self.lin(qlat, p + ".wq_b").view(T, H, dh)
        if self.ds:   # bf16 arithmetic at every op
            ms = bf16(bf16(q * q).mean(-1, keepdim=True))
            q = bf16(q * bf16(torch.rsqrt(bf16(ms + c["eps"]))))
        else:
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + c["eps"])
        q = self.rope_last(q, ang)
        kv = self.rms(self.lin(a, p + ".wkv"), p + ".kv_norm")
        kv = self.rope_last(kv, ang)
        kv = torch.cat((q8(kv[:, :-r], 64), kv[:, -r:]), -1)
        pos = torch.arange(T)
        visible = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - c["window"])
        entries = kv
        if ratio:
            comp = self.compress(a, p + ".compressor", ratio, dh, False)
            n = comp.shape[0]
            cvis = torch.arange(n)[None, :] < ((pos + 1) // ratio)[:, None]
            if ratio == 4:
                cvis = cvis & self.indexer(l, a, qlat)
            entries = torch.cat((kv, comp), 0)
            visible = torch.cat((visible, cvis), 1)
        scores = torch.einsum("thd,sd->ths", q, entries) * dh ** -0.5
        scores = scores.masked_fill(~visible[:, None, :], -math.inf)
        sink = self.w(p + ".attn_sink")
        m = torch.maximum(scores.amax(-1), sink[None, :])
        num = torch.exp(scores - m[..., None])
        den = num.sum(-1) + torch.exp(sink[None, :] - m)
        if self.ds:
            # the kernel: max over the attended scores only; numerators bf16 in the product
            m2 = scores.amax(-1)
            num = torch.exp(scores - m2[..., None])
            den = num.sum(-1) + torch.exp(sink[None, :] - m2)
            num = bf16(num)
        o = self.rb(torch.einsum("ths,sd->thd", num, entries) / den[..., None])
        o = self.rope_last(o, ang, inverse=True)
        g, ro = c["o_groups"], c["o_lora"]
        wo_a = self.w(p + ".wo_a.weight").view(g, ro, -1)
        z = self.rb(torch.einsum("tgd,grd->tgr", o.reshape(T, g, -1), wo_a))
        return self.lin(z.reshape(T, g * ro), p + ".wo_b")

    # --- hyper-connections (§6) -------------------------------------------------------
    def hc_mix(self, X, fn):
        xf = X.reshape(X.shape[0], -1)
        return (xf @ fn.T) * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.c["eps"])

    def hc_pre(self, X, prefix, kind):
        c = self.c
        m = self.hc_mix(X, self.w(f"{prefix}.hc_{kind}_fn"))
        pre, post, comb = sinkhorn_split(m, self.w(f"{prefix}.hc_{kind}_scale"),
                                         self.w(f"{prefix}.hc_{kind}_base"), c["hc"],
                                         c["hc_iters"], c["hc_eps"])
        return self.rb((pre[:, :, None] * X).sum(1)), post, comb

    def hc_post(self, o, X, post, comb):
        return self.rb(post[:, :, None] * o[:, None, :] + torch.einsum("tjk,tjd->tkd", comb, X))

    def hc_head(self, X, prefix):
        m = self.hc_mix(X, self.w(prefix + "hc_head_fn"))
        pre = torch.sigmoid(m * self.w(prefix + "hc_head_scale") + self.w(prefix + "hc_head_base"))
        return self.rb(((pre + self.c["hc_eps"])[:, :, None] * X).sum(1))

    # --- MoE (§8) ---------------------------------------------------------------------
    def swiglu(self, x, prefix, weight=None):
        lim = self.c["swiglu_limit"]
        a, b = self.lin(x, prefix + ".w1"), self.lin(x, prefix + ".w3")
        if lim > 0:
            b = b.clamp(-lim, lim)
            a = a.clamp(max=lim)
        u = F.silu(a) * b
        if weight is not None:
            u = weight[:, None] * u
        return self.lin(self.rb(u), prefix + ".w2")

    def moe(self, l, x, ids):
        c, p = self.c, self.lp(l) + ".ffn"
        g = torch.sqrt(F.softplus(x @ self.w(p + ".gate.weight").T))           # [T, E]
        if l < c["hash_layers"]:
            idx = self.w(p + ".gate.tid2eid")[torch.as_tensor(ids)]
        else:
            idx = torch.topk(g + self.w(p + ".gate.bias"), c["topk"], -1).indices
        wts = g.gather(1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * c["route_scale"]
        y = torch.zeros_like(x)
        for e in torch.unique(idx).tolist():
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            y.index_add_(0, tok, self.swiglu(x[tok], f"{p}.experts.{e}", wts[tok, slot]))
        y = y + self.swiglu(x, p + ".shared_experts")
        return self.rb(y)

    # --- blocks and the model (§4, §7, §9) ----------------------------------------------
    def block(self, l, X, ids):
        p = self.lp(l)
        y, post, comb = self.hc_pre(X, p, "attn")
        X = self.hc_post(self.attention(l, self.rms(y, p + ".attn_norm")), X, post, comb)
        y, post, comb = self.hc_pre(X, p, "ffn")
        return self.hc_post(self.moe(l, self.rms(y, p + ".ffn_norm"), ids), X, post, comb)

    def streams(self, ids):
        """ids -> the final residual streams [T, M, D]."""
        h = self.embed(ids)
        X = h[:, None, :].repeat(1, self.c["hc"], 1)
        for l in range(self.c["layers"]):
            X = self.block(l, X, ids)
        return X

    def logits_of(self, X, prefix=""):
        x = self.rms(self.hc_head(X, prefix), prefix + "norm")
        return self.head(x)

    def forward(self, ids, last_only=False):
        X = self.streams(ids)
        return self.logits_of(X[-1:] if last_only else X)

    def mtp_logits(self, ids):
        """MTP module 0: row t reads the main streams at t and id t+1 (V3's pairing, §9), and
        predicts id t+2. Returns [T - 1, vocab]."""
        L = self.c["layers"]
        X = self.streams(ids)[:-1]
        nxt = ids[1:]
        e = self.rms(self.embed(nxt), "mtp.0.enorm")
        Xn = self.rms(X, "mtp.0.hnorm")
        Z = self.lin(e, "mtp.0.e_proj")[:, None, :] + self.lin(Xn, "mtp.0.h_proj")
        Z = self.rb(Z)
        Z = self.block(L, Z, nxt)
        return self.logits_of(Z, "mtp.0.")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json + safetensors)")
    ap.add_argument("--prompt-ids", action="append", required=True,
                    help="comma-separated token ids; repeat for more sequences")
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--logits-out", required=True, help=".npy, float32 [seqs, N, vocab]")
    ap.add_argument("--tokens-out", required=True, help='.json {"tokens": [[...], ...]}')
    ap.add_argument("--numerics", choices=("exact", "deepseek"), default="exact",
                    help="deepseek: also DeepSeek's bf16 storage points and FP8 activations")
    ap.add_argument("--mtp-logits-out", default=None,
                    help=".npy: per sequence, MTP module 0's logits over prompt + generated "
                         "tokens (float32 [seqs, len - 1, vocab]; sequences of equal length)")
    ap.add_argument("--cache-gb", type=float, default=None,
                    help="keep at most this many GB of float64 weights (default: all); past it "
                         "weights are decoded at each use, routed experts always, the embedding "
                         "and LM head read by rows (for real-shape checkpoints)")
    args = ap.parse_args(argv)
    if args.max_tokens < 1:
        ap.error("--max-tokens must be >= 1")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = ModelV4(args.model, args.numerics,
                    None if args.cache_gb is None else int(args.cache_gb * 1e9))
    vocab = model.c["vocab"]
    prompts = [[int(t) for t in p.split(",") if t.strip()] for p in args.prompt_ids]
    for p in prompts:
        if not p or min(p) < 0 or max(p) >= vocab:
            ap.error(f"bad prompt {p} for vocab_size {vocab}")
    all_logits, all_tokens, mtp = [], [], []
    for i, p in enumerate(prompts):
        model.index_gaps = {}
        logits, toks = generate(model, p, args.max_tokens)
        all_logits.append(logits.numpy().astype(np.float32))
        all_tokens.append(toks)
        top2 = torch.topk(logits, 2, dim=-1).values
        gaps = (top2[:, 0] - top2[:, 1]) / logits.abs().max(-1).values
        print(f"sequence {i}: smallest top-2 gap/max|logit| {float(gaps.min()):.2e} at step "
              f"{int(gaps.argmin())}", file=sys.stderr)
        if model.index_gaps:
            (l, t), g = min(model.index_gaps.items(), key=lambda kv: kv[1])
            print(f"sequence {i}: smallest index top-{model.c['index_topk']} gap/max|score| "
                  f"{g:.2e} at layer {l} position {t}", file=sys.stderr)
        if args.mtp_logits_out and model.c["mtp"]:
            mtp.append(model.mtp_logits(p + toks).numpy().astype(np.float32))
    np.save(args.logits_out, np.stack(all_logits))
    with open(args.tokens_out, "w") as f:
        json.dump({"tokens": all_tokens}, f)
    if args.mtp_logits_out and mtp:
        np.save(args.mtp_logits_out, np.stack(mtp) if len({m.shape for m in mtp}) == 1
                else np.array(mtp, dtype=object), allow_pickle=True)


if __name__ == "__main__":
    main()
