"""Self-checks of the reference: formats, RoPE, YaRN, gate, absorbed-vs-expanded MLA, int8, CLI,
DeepSeek Sparse Attention (Hadamard, FP8 e4m3/ue8m0, selection, brute-force indexer, dense limit).

  /usr/bin/python3 tests/reference/self_test.py [-v]
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402
import make_random_checkpoint as mrc  # noqa: E402
import reference as ref  # noqa: E402
import safetensors_io as st  # noqa: E402

PY = sys.executable


class Fp8Bf16Test(unittest.TestCase):
    def test_known_e4m3_values(self):
        t = st.E4M3_TABLE
        known = {0x00: 0.0, 0x38: 1.0, 0x40: 2.0, 0x3C: 1.5, 0x7E: 448.0, 0x01: 2.0 ** -9,
                 0x07: 7 / 8 * 2.0 ** -6, 0x08: 2.0 ** -6, 0x30: 0.5, 0xB8: -1.0,
                 0xFE: -448.0, 0x81: -(2.0 ** -9), 0x77: 240.0, 0x78: 256.0}
        for byte, v in known.items():
            self.assertEqual(t[byte], v, hex(byte))
        self.assertTrue(np.isnan(t[0x7F]) and np.isnan(t[0xFF]))
        self.assertEqual(np.isnan(t).sum(), 2)
        self.assertTrue(np.signbit(t[0x80]) and t[0x80] == 0)
        self.assertEqual(np.nanmax(np.abs(t)), 448.0)

    def test_e4m3_table_matches_f32_bit_construction(self):
        # Independent decode: normal codes map to f32 bits directly (rebias 7 -> 127).
        for byte in range(256):
            exp, mant = (byte >> 3) & 0xF, byte & 7
            if exp == 0 or (exp == 0xF and mant == 7):
                continue
            bits = ((byte & 0x80) << 24) | ((exp - 7 + 127) << 23) | (mant << 20)
            v = struct.unpack("<f", struct.pack("<I", bits))[0]
            self.assertEqual(st.E4M3_TABLE[byte], v, hex(byte))
        pos = st.E4M3_TABLE[:0x7F]
        self.assertTrue(np.all(np.diff(pos) > 0))

    def test_e4m3_encode(self):
        codes = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
        back = st.f32_to_e4m3_bits(st.e4m3_bits_to_f32(codes))
        np.testing.assert_array_equal(back, codes)
        # ties go to the even code; saturation at +-448
        self.assertEqual(st.f32_to_e4m3_bits(np.array([1.0625]))[0], 0x38)
        self.assertEqual(st.f32_to_e4m3_bits(np.array([1.1875]))[0], 0x3A)
        self.assertEqual(st.f32_to_e4m3_bits(np.array([1.07]))[0], 0x39)
        np.testing.assert_array_equal(st.f32_to_e4m3_bits(np.array([1e4, -1e4, 464.0])),
                                      [0x7E, 0xFE, 0x7E])

    def test_bf16(self):
        x = np.array([1.0, -2.5, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.140625], dtype=np.float32)
        bits = st.f32_to_bf16_bits(x)
        np.testing.assert_array_equal(st.bf16_bits_to_f32(bits),
                                      np.array([1.0, -2.5, 1.0, 1 + 2 ** -6, 3.140625], np.float32))

    def test_block_dequant_partial_tiles(self):
        rng = np.random.default_rng(1)
        w = rng.standard_normal((200, 300))
        bits, scale = st.block_quant_fp8(w)
        self.assertEqual(scale.shape, (2, 3))
        deq = st.block_dequant(st.e4m3_bits_to_f32(bits), scale)
        for i, j in [(0, 0), (127, 128), (128, 255), (199, 299), (150, 10)]:
            expect = float(st.E4M3_TABLE[bits[i, j]]) * float(scale[i // 128, j // 128])
            self.assertEqual(deq[i, j], expect)
        np.testing.assert_allclose(deq, w, atol=np.abs(w).max() / 14)


class SafetensorsTest(unittest.TestCase):
    def _tensors(self):
        rng = np.random.default_rng(2)
        return {"a.f32": ("F32", rng.standard_normal((3, 5)).astype(np.float32)),
                "b.bf16": ("BF16", st.f32_to_bf16_bits(rng.standard_normal((7,)))),
                "c.fp8": ("F8_E4M3", np.arange(256, dtype=np.uint8).reshape(16, 16)),
                "c.fp8_scale_inv": ("F32", np.array([[0.5]], np.float32)),
                "d.i64": ("I64", np.arange(4, dtype=np.int64))}

    def test_roundtrip_single_and_sharded(self):
        tensors = self._tensors()
        for shards in (1, 3):
            with tempfile.TemporaryDirectory() as d:
                st.write_checkpoint(d, tensors, num_shards=shards)
                files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
                self.assertEqual(len(files), shards)
                for f in files:
                    with open(os.path.join(d, f), "rb") as fh:
                        self.assertEqual(struct.unpack("<Q", fh.read(8))[0] % 8, 0)
                ck = st.Checkpoint(d)
                self.assertEqual(sorted(ck.names()), sorted(tensors))
                for name, (dt, arr) in tensors.items():
                    self.assertEqual(ck.dtype(name), dt)
                    f = ck._file(ck.weight_map[name])
                    np.testing.assert_array_equal(f.raw(name), arr)
                np.testing.assert_array_equal(
                    ck.get("b.bf16"), st.bf16_bits_to_f32(tensors["b.bf16"][1]))
                fp8 = ck.get_f64("c.fp8")
                self.assertEqual(fp8[3, 8], 0.5)  # byte 0x38 = 1.0, scale 0.5
                self.assertTrue(np.isnan(fp8[7, 15]))


def hf_rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rope(x, cos, sin):
    """HF DeepseekV3 apply_rotary_pos_emb: permute (d/2, 2)->(2, d/2), then rotate_half."""
    t, h, d = x.shape
    x = x.view(t, h, d // 2, 2).transpose(3, 2).reshape(t, h, d)
    emb_cos, emb_sin = torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]
    return x * emb_cos + hf_rotate_half(x) * emb_sin


class RopeTest(unittest.TestCase):
    def test_adjacent_pairs_equal_hf_and_complex_forms(self):
        torch.manual_seed(0)
        cfg = mrc.make_config("v3")
        inv_freq, cs_mul, _ = ref.rope_params(cfg)
        t, h, d = 9, 3, cfg["qk_rope_head_dim"]
        ang = torch.arange(t, dtype=ref.DT)[:, None] * inv_freq[None]
        cos, sin = torch.cos(ang) * cs_mul, torch.sin(ang) * cs_mul
        q, k = torch.randn(t, h, d, dtype=ref.DT), torch.randn(t, 1, d, dtype=ref.DT)
        ours_q, ours_k = ref.apply_rope_adjacent(q, cos, sin), ref.apply_rope_adjacent(k, cos, sin)
        hf_q, hf_k = hf_apply_rope(q, cos, sin), hf_apply_rope(k, cos, sin)
        perm = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))
        self.assertTrue(torch.allclose(ours_q[..., perm], hf_q, atol=1e-12))
        def dots(a, b):
            return torch.einsum("thd,shd->hts", a, b.expand(-1, h, -1))
        self.assertTrue(torch.allclose(dots(ours_q, ours_k), dots(hf_q, hf_k), atol=1e-10))
        # DeepSeek's own code: view_as_complex(x.view(..., d/2, 2)) * polar(1, freqs)
        freqs = torch.polar(torch.full_like(ang, cs_mul), ang)[:, None]
        cq = torch.view_as_complex(q.reshape(t, h, d // 2, 2).contiguous()) * freqs
        self.assertTrue(torch.allclose(ours_q, torch.view_as_real(cq).reshape(t, h, d), atol=1e-12))
        # a wrong (rotate-half without permute) convention must differ
        cos2, sin2 = torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]
        self.assertFalse(torch.allclose(ours_q, q * cos2 + hf_rotate_half(q) * sin2))

    def test_yarn_parameters(self):
        self.assertEqual(ref.yarn_find_correction_range(32, 1, 64, 10000, 4096), (10, 23))
        v3 = {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rope_theta": 10000,
              "rope_scaling": {"type": "yarn", "factor": 40,
                               "original_max_position_embeddings": 4096, "beta_fast": 32,
                               "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}
        inv_freq, cs_mul, scale = ref.rope_params(v3)
        extra = 1.0 / 10000 ** (torch.arange(0, 64, 2, dtype=ref.DT) / 64)
        self.assertTrue(torch.allclose(inv_freq[:11], extra[:11]))   # high freqs kept
        self.assertTrue(torch.allclose(inv_freq[23:], extra[23:] / 40))  # low freqs scaled
        self.assertEqual(cs_mul, 1.0)
        self.assertAlmostEqual(scale, 192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2, places=14)
        v3["rope_scaling"]["mscale_all_dim"] = 0  # no softmax factor, cos/sin scaled by mscale
        _, cs_mul, scale = ref.rope_params(v3)
        self.assertAlmostEqual(cs_mul, 0.1 * math.log(40) + 1)
        self.assertAlmostEqual(scale, 192 ** -0.5)
        v3["rope_scaling"] = None
        inv_freq, cs_mul, scale = ref.rope_params(v3)
        self.assertTrue(torch.allclose(inv_freq, extra) and cs_mul == 1.0)


def stub_model(cfg, weights):
    m = ref.Model.__new__(ref.Model)
    m.cfg, m._w = cfg, {k: torch.as_tensor(v, dtype=ref.DT) for k, v in weights.items()}
    return m


def naive_route(s, bias, c):
    """Loop-by-loop gate for one token; s = scores (list), bias list or None."""
    n, k = len(s), c["num_experts_per_tok"]
    b = [s[e] + (bias[e] if bias is not None else 0.0) for e in range(n)]
    gsize = n // c["n_group"]
    if c["topk_method"] == "greedy":
        allowed = set(range(n))
    else:
        gscores = []
        for g in range(c["n_group"]):
            vals = sorted(b[g * gsize:(g + 1) * gsize], reverse=True)
            gscores.append(vals[0] + vals[1] if c["topk_method"] == "noaux_tc" else vals[0])
        kept = sorted(range(c["n_group"]), key=lambda g: -gscores[g])[:c["topk_group"]]
        allowed = {e for g in kept for e in range(g * gsize, (g + 1) * gsize)}
    chosen = sorted(allowed, key=lambda e: -b[e])[:k]
    w = [s[e] for e in chosen]
    if c["norm_topk_prob"] and k > 1:
        w = [x / (sum(w) + 1e-20) for x in w]
    return dict(zip(chosen, [x * c["routed_scaling_factor"] for x in w]))


class GateTest(unittest.TestCase):
    base = {"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
            "norm_topk_prob": True, "routed_scaling_factor": 2.5}

    def _route(self, cfg, logits, bias=None):
        w = {"model.layers.0.mlp.gate.weight": np.array(logits, dtype=np.float64)[:, None]}
        if bias is not None:
            w["model.layers.0.mlp.gate.e_score_correction_bias"] = np.array(bias)
        idx, wt = stub_model(cfg, w).route(0, torch.ones(1, 1, dtype=ref.DT))
        return dict(zip(idx[0].tolist(), wt[0].tolist()))

    def test_noaux_tc_hand_case(self):
        cfg = {**self.base, "topk_method": "noaux_tc", "scoring_func": "sigmoid"}
        s = [0.95, 0.05, 0.6, 0.58, 0.55, 0.55, 0.1, 0.1]
        logit = [math.log(p / (1 - p)) for p in s]
        got = self._route(cfg, logit, [0.0] * 8)
        self.assertEqual(set(got), {2, 3})  # expert 0 is best but its group loses
        self.assertAlmostEqual(got[2], 2.5 * 0.6 / 1.18)
        got = self._route(cfg, logit, [0, 0, 0, 0, 0.2, 0, 0, 0])
        self.assertEqual(set(got), {4, 2})  # bias picks expert 4, weight still uses s
        self.assertAlmostEqual(got[4], 2.5 * 0.55 / 1.15)

    def test_follow_route_takes_the_engines_experts_and_measures_the_gap(self):
        cfg = {**self.base, "topk_method": "greedy", "scoring_func": "softmax",
               "num_hidden_layers": 1, "first_k_dense_replace": 0}
        logits = [math.log(p) for p in [0.30, 0.28, 0.27, 0.05, 0.04, 0.03, 0.02, 0.01]]
        w = {"model.layers.0.mlp.gate.weight": np.array(logits, dtype=np.float64)[:, None]}
        m = stub_model(cfg, w)
        m.tie_gaps = []
        x = torch.ones(1, 1, dtype=ref.DT)
        m.follow = {0: [[0, 1]]}  # the reference's own choice: nothing overridden
        idx, _ = m.route(0, x)
        self.assertEqual(sorted(idx[0].tolist()), [0, 1])
        self.assertEqual(m.tie_gaps, [])
        m.follow = {0: [[0, 2]]}  # 2 instead of 1: a gap of 0.28 - 0.27 of max 0.30
        idx, wt = m.route(0, x)
        self.assertEqual(sorted(idx[0].tolist()), [0, 2])
        self.assertAlmostEqual(dict(zip(idx[0].tolist(), wt[0].tolist()))[2], 2.5 * 0.27 / 0.57)
        (layer, pos, gap), = m.tie_gaps
        self.assertEqual((layer, pos), (0, 0))
        self.assertAlmostEqual(gap, 0.01 / 0.30)

    def test_random_against_naive(self):
        rng = np.random.default_rng(3)
        for method, func in [("noaux_tc", "sigmoid"), ("greedy", "softmax"),
                             ("group_limited_greedy", "softmax")]:
            for norm in (True, False):
                cfg = {"n_routed_experts": 16, "num_experts_per_tok": 4, "n_group": 4,
                       "topk_group": 2, "norm_topk_prob": norm, "routed_scaling_factor": 1.7,
                       "topk_method": method, "scoring_func": func}
                gate, bias = rng.standard_normal((16, 8)), 0.1 * rng.standard_normal(16)
                wts = {"model.layers.0.mlp.gate.weight": gate,
                       "model.layers.0.mlp.gate.e_score_correction_bias": bias}
                x = torch.from_numpy(rng.standard_normal((50, 8)))
                idx, wt = stub_model(cfg, wts).route(0, x)
                logits = x.numpy() @ gate.T
                for t in range(50):
                    if func == "sigmoid":
                        s = 1 / (1 + np.exp(-logits[t]))
                    else:
                        s = np.exp(logits[t] - logits[t].max())
                        s = s / s.sum()
                    want = naive_route(list(s), list(bias) if method == "noaux_tc" else None, cfg)
                    got = dict(zip(idx[t].tolist(), wt[t].tolist()))
                    self.assertEqual(set(got), set(want), (method, t))
                    for e in want:
                        self.assertAlmostEqual(got[e], want[e], places=12)


def naive_quantize_i8(row):
    """One row, element by element in numpy float32: (q list per block, scale per block)."""
    qs, ss = [], []
    for b in range(0, len(row), 128):
        blk = [np.float32(v) for v in row[b:b + 128]] + [np.float32(0)] * max(0, b + 128 - len(row))
        s = np.float32(max(abs(v) for v in blk)) / np.float32(127.0)
        q = [0.0] * 128 if s == 0 else [float(min(127, max(-127, np.rint(v / s)))) for v in blk]
        qs.append(q)
        ss.append(s)
    return qs, ss


class Int8Test(unittest.TestCase):
    def test_hand_cases(self):
        # Block 0 of row 0: max 127, so s = 1 and q = round-half-even(x); block 1 (columns 128-129,
        # zero-padded to 128) all zero: s = 0, q = 0. Row 1: max 254, s = 2. K = 130.
        x = np.zeros((2, 130))
        x[0, :8] = [2.5, 3.5, -2.5, -3.5, 0.49, 126.6, -127.0, 0.5]
        x[1, :4] = [5.0, 7.0, -254.0, 1.0]
        x[1, 129] = 3.0  # block 1 of row 1: max 3, s = 3/127
        q, s = ref.quantize_i8(torch.from_numpy(x))
        self.assertEqual(q.shape, (2, 2, 128))
        self.assertEqual(s.dtype, torch.float32)
        self.assertEqual(q[0, 0, :8].tolist(), [2, 4, -2, -4, 0, 127, -127, 0])
        self.assertTrue((q[0, 0, 8:] == 0).all())
        self.assertEqual(s[0].tolist(), [1.0, 0.0])
        self.assertTrue((q[0, 1] == 0).all())
        self.assertEqual(q[1, 0, :4].tolist(), [2, 4, -127, 0])  # 2.5 -> 2, 3.5 -> 4, 0.5 -> 0
        self.assertEqual(s[1, 0].item(), 2.0)
        self.assertEqual(q[1, 1, 1].item(), 127)
        self.assertEqual(q[1, 1].abs().sum().item(), 127)  # the padding stays 0
        self.assertEqual(s[1, 1].item(), float(np.float32(3.0) / np.float32(127.0)))
        # y = sum over blocks of dot(q_x, q_w) * (s_x * s_w): with w = x, row 0 . row 0 is
        # 2^2 + 4^2 + 2^2 + 4^2 + 127^2 + 127^2 (times 1 * 1; block 1 is zero).
        y = ref.i8_product(torch.from_numpy(x), q, s)
        self.assertEqual(y[0, 0].item(), 4 + 16 + 4 + 16 + 2 * 127 ** 2)
        self.assertEqual(y[0, 1].item(), (2 * 2 + 4 * 4 + 2 * 127) * 2.0)

    def test_random_against_naive(self):
        rng = np.random.default_rng(5)
        for k in (64, 128, 300):
            x = rng.standard_normal((3, k)) * np.array([[1.0], [1e-3], [50.0]])
            w = rng.standard_normal((5, k)).astype(np.float32)
            w[2, :] = 0.0   # an all-zero weight row
            x[0, 7] = 0.5 * np.float32(np.abs(x[0, :128]).max()) / 127  # near a half step
            q, s = ref.quantize_i8(torch.from_numpy(x))
            qw, sw = ref.quantize_i8(torch.from_numpy(w.astype(np.float64)))
            y = ref.i8_product(torch.from_numpy(x), qw, sw).numpy()
            for m in range(3):
                nq, ns = naive_quantize_i8(x[m])
                self.assertEqual(q[m].tolist(), nq, (k, m))
                self.assertEqual(s[m].tolist(), [float(v) for v in ns])
                for n in range(5):
                    wq, ws = naive_quantize_i8(w[n])
                    want = sum(float(np.dot(nq[b], wq[b])) * float(ns[b] * ws[b])
                               for b in range(len(ns)))
                    self.assertAlmostEqual(y[m, n], want, delta=1e-12 * max(1.0, abs(want)))
            self.assertTrue((qw[2] == 0).all() and (sw[2] == 0).all())
            # int8 of both operands: within a few steps of the block max of the exact product
            exact = x @ w.astype(np.float64).T
            self.assertLess(np.abs(y - exact).max() / np.abs(exact).max(), 0.05)

    def test_which_weights(self):
        rng = np.random.default_rng(6)
        names = ["model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_b_proj",
                 "model.layers.0.mlp.experts.3.down_proj", "lm_head",
                 "model.layers.1.shared_head.head", "model.layers.1.eh_proj"]
        m = stub_model({}, {n + ".weight": rng.standard_normal((4, 200)) for n in names})
        m.requant, m._i8 = "int8", {}
        x = torch.from_numpy(rng.standard_normal((3, 200)))
        for n in names:
            w = m.w(n + ".weight")
            if n.endswith("kv_b_proj"):
                self.assertTrue(torch.equal(m.linear(x, n), x @ w.T))
            else:
                self.assertTrue(torch.equal(m.linear(x, n), ref.i8_product(x, *ref.quantize_i8(w))), n)
        self.assertEqual(sorted(m._i8), sorted(n for n in names if not n.endswith("kv_b_proj")))
        with self.assertRaises(ValueError):
            m.linear(x, "model.layers.0.mlp.gate")  # the router never goes through linear()

    def test_compare_clean_rows(self):
        rng = np.random.default_rng(7)
        ref_l = rng.standard_normal((3, 4, 16)).astype(np.float32)
        toks = [[0] * 4] * 3
        eng = ref_l.copy()
        eng[2, 1:, 0] += 0.02 * np.abs(ref_l[2, 1:]).max()  # 3 of 12 rows off by 2e-2
        ok, msgs = compare.compare(eng, ref_l, toks, toks, 4e-2, clean=(1e-3, 0.25))
        self.assertTrue(ok, msgs)
        self.assertIn("9 of 12 rows within 0.001", msgs[0])
        eng[:2, :, 0] += 0.02 * np.abs(ref_l).max()  # now every row
        ok, msgs = compare.compare(eng, ref_l, toks, toks, 4e-2, clean=(1e-3, 0.25))
        self.assertFalse(ok)

    def test_follow_stops_where_tokens_differ(self):
        class Fixed:  # every step's argmax is 5
            follow = {p: [frozenset({p})] for p in range(8)}

            def forward(self, seq, last_only=False):
                return torch.nn.functional.one_hot(torch.tensor([5] * len(seq)), 9).to(ref.DT)
        m = Fixed()
        _, toks = ref.generate(m, [1, 2], 4, engine_tokens=[5, 5, 5, 5])
        self.assertEqual((toks, sorted(m.follow)), ([5] * 4, list(range(8))))
        _, toks = ref.generate(m, [1, 2], 4, engine_tokens=[5, 6, 7, 8])
        # step 1 leaves the engine's tokens: its token (position 3) and later are not followed
        self.assertEqual((toks, sorted(m.follow)), ([5] * 4, [0, 1, 2]))


class AbsorbedModel(ref.Model):
    """MLA in the absorbed, cached form of SPEC §2 (W_uk into q, W_uv after the sum)."""

    def attention(self, l, x):
        c, p = self.cfg, f"model.layers.{l}.self_attn"
        nh, nope, vd, r = (c["num_attention_heads"], c["qk_nope_head_dim"], c["v_head_dim"],
                           c["kv_lora_rank"])
        q_nope, q_pe, c_kv, k_pe = self.mla_inputs(l, x)
        wkvb = self.w(p + ".kv_b_proj.weight").view(nh, nope + vd, r)
        w_uk, w_uv = wkvb[:, :nope, :], wkvb[:, nope:, :]
        cache_ckv, cache_kpe, outs = [], [], []
        for t in range(x.shape[0]):  # decode one token at a time from a latent cache
            cache_ckv.append(c_kv[t])
            cache_kpe.append(k_pe[t])
            ckv, kpe = torch.stack(cache_ckv), torch.stack(cache_kpe)
            q_lat = torch.einsum("hn,hnr->hr", q_nope[t], w_uk)
            scores = (q_lat @ ckv.T + q_pe[t] @ kpe.T) * self.softmax_scale
            o_lat = torch.softmax(scores, dim=-1) @ ckv
            outs.append(torch.einsum("hvr,hr->hv", w_uv, o_lat).reshape(nh * vd))
        return self.linear(torch.stack(outs), p + ".o_proj")


def run_ref(model_dir, prompts, n, out_dir):
    logits, tokens = os.path.join(out_dir, "l.npy"), os.path.join(out_dir, "t.json")
    cmd = [PY, os.path.join(HERE, "reference.py"), "--model", model_dir, "--max-tokens", str(n),
           "--logits-out", logits, "--tokens-out", tokens]
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    with open(tokens) as f:
        return np.load(logits), json.load(f)["tokens"], logits, tokens


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for preset in ("v3", "v2lite", "v2"):
            for dtype in ("bf16", "fp8"):
                d = os.path.join(cls.tmp.name, f"{preset}-{dtype}")
                mrc.write_random_checkpoint(d, preset, dtype, seed=0)
                cls.dirs[preset, dtype] = d

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_absorbed_equals_expanded(self):
        ids = [3, 17, 200, 5, 5, 99, 511, 0, 42, 7, 300]
        for key, d in self.dirs.items():
            a, b = ref.Model(d).forward(ids), AbsorbedModel(d).forward(ids)
            err = float((a - b).abs().max() / b.abs().max())
            self.assertLess(err, 1e-12, key)

    def test_moe_matches_per_token_loop(self):
        m = ref.Model(self.dirs["v3", "fp8"])
        gen = torch.Generator().manual_seed(4)
        x = torch.randn(6, m.cfg["hidden_size"], dtype=ref.DT, generator=gen)
        y = m.moe(1, x)
        idx, wt = m.route(1, x)
        for t in range(6):
            want = m.mlp(x[t:t + 1], "model.layers.1.mlp.shared_experts")[0]
            for e, w in zip(idx[t].tolist(), wt[t].tolist()):
                want = want + w * m.mlp(x[t:t + 1], f"model.layers.1.mlp.experts.{e}")[0]
            self.assertTrue(torch.allclose(y[t], want, atol=1e-12))

    def test_int8_requant_close_to_exact(self):
        ids = [3, 17, 200, 5, 5, 99, 511, 0, 42]
        for compute in ("exact", "fast"):
            exact = ref.Model(self.dirs["v3", "fp8"], fast=compute == "fast")
            i8 = ref.Model(self.dirs["v3", "fp8"], fast=compute == "fast", requant="int8")
            for f in ("forward", "mtp_logits"):
                a, b = getattr(i8, f)(ids), getattr(exact, f)(ids)
                err = float((a - b).abs().max() / b.abs().max())
                self.assertTrue(0 < err < 0.2, (compute, f, err))
            self.assertIn("lm_head", i8._i8)
            self.assertIn("model.layers.3.eh_proj", i8._i8)
            self.assertIn("model.layers.3.shared_head.head", i8._i8)
            self.assertFalse([n for n in i8._i8 if n.endswith((".kv_b_proj", ".gate"))])

    def test_fp8_weights_close_to_bf16(self):
        fp8, bf16 = st.Checkpoint(self.dirs["v3", "fp8"]), st.Checkpoint(self.dirs["v3", "bf16"])
        name = "model.layers.1.mlp.experts.3.up_proj.weight"
        self.assertEqual(fp8.dtype(name), "F8_E4M3")
        self.assertEqual(fp8.get(name + "_scale_inv").shape, (1, 2))
        self.assertEqual(fp8.dtype("model.layers.1.mlp.gate.weight"), "BF16")
        self.assertEqual(fp8.dtype("model.layers.3.eh_proj.weight"), "BF16")
        self.assertEqual(fp8.dtype("model.layers.1.mlp.gate.e_score_correction_bias"), "F32")
        a, b = fp8.get_f64(name), bf16.get_f64(name)
        self.assertLess(np.abs(a - b).max(), np.abs(b).max() / 14)

    def test_cli_generation_and_compare(self):
        prompts, n = [[5, 6, 7, 8], [9], [400, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]], 6
        with tempfile.TemporaryDirectory() as out:
            logits, tokens, lpath, tpath = run_ref(self.dirs["v3", "fp8"], prompts, n, out)
            self.assertEqual(logits.shape, (3, n, 512))
            self.assertEqual(logits.dtype, np.float32)
            model = ref.Model(self.dirs["v3", "fp8"])
            for s, p in enumerate(prompts):
                self.assertEqual(tokens[s], [int(np.argmax(r)) for r in logits[s]])
                full = model.forward(p + tokens[s]).numpy()  # logits of the whole sequence
                np.testing.assert_allclose(logits[s], full[len(p) - 1:len(p) - 1 + n], rtol=1e-6)
            ok, msgs = compare.compare(logits, logits, tokens, tokens, 1e-3)
            self.assertTrue(ok, msgs)
            bad = logits.copy()
            bad[1, 2, 10] += 0.01 * np.abs(bad[1, 2]).max()
            ok, msgs = compare.compare(bad, logits, tokens, tokens, 1e-3)
            self.assertFalse(ok)
            self.assertIn("sequence 1 step 2", msgs[-1])
            bad_tokens = json.loads(json.dumps(tokens))
            bad_tokens[2][4] += 1
            ok, msgs = compare.compare(logits, logits, bad_tokens, tokens, 1e-3)
            self.assertFalse(ok)
            np.save(os.path.join(out, "bad.npy"), bad)
            cmd = [PY, os.path.join(HERE, "compare.py"), "--ref-logits", lpath,
                   "--ref-tokens", tpath, "--engine-tokens", tpath]
            quiet = {"stdout": subprocess.DEVNULL}
            for engine, rc in [(lpath, 0), (os.path.join(out, "bad.npy"), 1)]:
                got = subprocess.run(cmd + ["--engine-logits", engine], **quiet).returncode
                self.assertEqual(got, rc)

    def test_sharded_and_deterministic(self):
        with tempfile.TemporaryDirectory() as out:
            d2 = os.path.join(out, "again")
            mrc.write_random_checkpoint(d2, "v3", "fp8", seed=0)
            for f in ("config.json", "model.safetensors"):
                with open(os.path.join(d2, f), "rb") as a, \
                        open(os.path.join(self.dirs["v3", "fp8"], f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)
            sharded = os.path.join(out, "sharded")
            mrc.write_random_checkpoint(sharded, "v3", "fp8", seed=0, shards=3)
            ids = [1, 2, 3, 4]
            self.assertTrue(torch.equal(ref.Model(sharded).forward(ids),
                                        ref.Model(self.dirs["v3", "fp8"]).forward(ids)))

    def test_bounded_weight_cache_computes_the_same(self):
        # --cache-gb (real-shape checkpoints): weights decoded at each use, embeddings and LM
        # head read by rows; the same float64 values, so the same logits, whole or last row.
        ids = [3, 17, 200, 5, 5, 99]
        for key in (("v3", "fp8"), ("v2lite", "bf16")):
            whole = ref.Model(self.dirs[key]).forward(ids)
            frugal = ref.Model(self.dirs[key], cache_bytes=0)
            self.assertTrue(torch.equal(frugal.forward(ids), whole), key)
            np.testing.assert_allclose(frugal.forward(ids, last_only=True)[0].numpy(),
                                       whole[-1].numpy(), rtol=1e-12, atol=1e-12)
            self.assertEqual(frugal._w, {})


# ---------------------------------------------------------------------------------------------
# DeepSeek Sparse Attention (reference.py's docstring, steps 1-8).

def fwht(v):
    """Fast Walsh-Hadamard transform of a list (butterflies in natural order, unscaled)."""
    v, n, h = [float(e) for e in v], len(v), 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                v[j], v[j + h] = v[j] + v[j + h], v[j] - v[j + h]
        h *= 2
    return v


def naive_fp8_block(v, ue8m0):
    """One vector (list), blocks of 128: (e4m3 values from safetensors_io's table encoder,
    scales), element by element."""
    vals, scales = [], []
    for b in range(0, len(v), 128):
        blk = v[b:b + 128]
        amax = max(max(abs(e) for e in blk), 1e-4)
        s = 2.0 ** math.ceil(math.log2(amax / 448.0)) if ue8m0 else amax / 448.0
        for e in blk:
            code = st.f32_to_e4m3_bits(np.array([min(448.0, max(-448.0, e / s))]))[0]
            vals.append(float(st.E4M3_TABLE[code]))
        scales.append(s)
    return vals, scales


def naive_indexer(m, l, h_in):
    """DSA's index scores of layer l in loops (one vector at a time; numpy only for single dot
    products) from the layer's input h_in [T, hidden] (before input_layernorm): {(t, s): score}
    for s <= t. The general blocked form of step 6 (for D = 128 equal to the 1-block form)."""
    c, a = m.cfg, f"model.layers.{l}.self_attn"
    ix = a + ".indexer"
    hi, d, r, eps = c["index_n_heads"], c["index_head_dim"], c["qk_rope_head_dim"], c["rms_norm_eps"]
    ue8m0 = (c.get("quantization_config") or {}).get("scale_fmt") == "ue8m0"

    def w(name):
        return m.w(name).numpy()

    def matvec(mat, v):
        return [float(np.dot(mat[o], v)) for o in range(mat.shape[0])]

    def rms(v, name):
        g, ms = w(name), sum(e * e for e in v) / len(v)
        return [v[i] / math.sqrt(ms + eps) * g[i] for i in range(len(v))]

    def rope(v, pos):  # rotate-half on v[:r]
        out = list(v)
        for i in range(r // 2):
            ang = pos * float(m.inv_freq[i])
            cs, sn = math.cos(ang) * m.cs_mul, math.sin(ang) * m.cs_mul
            out[i] = v[i] * cs - v[i + r // 2] * sn
            out[i + r // 2] = v[i] * sn + v[i + r // 2] * cs
        return out

    q8, qs, k8, ks, wts = [], [], [], [], []
    for t in range(h_in.shape[0]):
        x = rms([float(e) for e in h_in[t]], f"model.layers.{l}.input_layernorm.weight")
        qr = rms(matvec(w(a + ".q_a_proj.weight"), x), a + ".q_a_layernorm.weight")
        q = matvec(w(ix + ".wq_b.weight"), qr)
        k = matvec(w(ix + ".wk.weight"), x)
        mean = sum(k) / d
        var = sum((e - mean) ** 2 for e in k) / d
        g, b = w(ix + ".k_norm.weight"), w(ix + ".k_norm.bias")
        k = [(k[i] - mean) / math.sqrt(var + 1e-6) * g[i] + b[i] for i in range(d)]
        k8t, kst = naive_fp8_block([e / math.sqrt(d) for e in fwht(rope(k, t))], ue8m0)
        k8.append(k8t)
        ks.append(kst)
        q8.append([])
        qs.append([])
        for h in range(hi):
            qh = [e / math.sqrt(d) for e in fwht(rope(q[h * d:(h + 1) * d], t))]
            vals, sc = naive_fp8_block(qh, ue8m0)
            q8[t].append(vals)
            qs[t].append(sc)
        wp = w(ix + ".weights_proj.weight")
        wts.append([float(np.dot(wp[h], x)) * hi ** -0.5 * d ** -0.5 for h in range(hi)])
    scores = {}
    for t in range(h_in.shape[0]):
        for s_ in range(t + 1):
            total = 0.0
            for h in range(hi):
                dot = 0.0
                for b in range(d // 128):
                    blk = slice(b * 128, (b + 1) * 128)
                    dot += qs[t][h][b] * ks[s_][b] * float(np.dot(q8[t][h][blk], k8[s_][blk]))
                total += wts[t][h] * max(0.0, dot)
            scores[t, s_] = total
    return scores


def naive_select(scores, num_tokens, k):
    """{t: set of positions}: the min(k, t + 1) largest scores, equal ones lower position first."""
    return {t: set(sorted(range(t + 1), key=lambda s_: (-scores[t, s_], s_))[:min(k, t + 1)])
            for t in range(num_tokens)}


def layer_input(m, ids, l):
    """The hidden state entering layer l (a main-model layer) for ids."""
    x = m.w("model.embed_tokens.weight")[torch.tensor(ids, dtype=torch.long)]
    for j in range(l):
        x = m.layer(j, x)
    return x


IDS20 = [3, 17, 200, 5, 5, 99, 511, 0, 42, 7, 300, 12, 12, 12, 450, 61, 8, 250, 33, 190]


class DsaMathTest(unittest.TestCase):
    def test_hadamard(self):
        for d in (1, 2, 4, 8, 32, 128, 256):
            h = ref.hadamard_matrix(d)
            want = [[(-1.0) ** bin(i & j).count("1") for j in range(d)] for i in range(d)]
            self.assertEqual(h.tolist(), want, d)  # Sylvester's, natural order
            self.assertTrue(torch.equal(h @ h.T, d * torch.eye(d, dtype=ref.DT)))
            hs = h * d ** -0.5
            self.assertLess(float((hs @ hs.T - torch.eye(d, dtype=ref.DT)).abs().max()), 1e-15)
            x = torch.randn(5, d, dtype=ref.DT, generator=torch.Generator().manual_seed(d))
            got = ref.hadamard_rotate(x)
            want = torch.tensor([fwht(row) for row in x.tolist()], dtype=ref.DT) * d ** -0.5
            self.assertLess(float((got - want).abs().max()), 1e-13, d)
            self.assertTrue(torch.allclose(got.norm(dim=-1), x.norm(dim=-1), rtol=1e-13))
        for d in (0, 3, 96):
            with self.assertRaises(ValueError):
                ref.hadamard_matrix(d)

    def test_e4m3_round(self):
        table = st.E4M3_TABLE
        pos = table[:0x7F]                           # the finite non-negative values, increasing
        finite = np.concatenate((pos, -pos))
        t = torch.from_numpy(finite)
        self.assertTrue(torch.equal(ref.e4m3_round(t), t))     # representable values are kept
        # every midpoint between neighbours goes to the even code; just off it, to the nearer one
        lo, hi = pos[:-1], pos[1:]
        mid = torch.from_numpy((lo + hi) / 2)
        even = torch.from_numpy(np.where(np.arange(0x7E) % 2 == 0, lo, hi))
        self.assertTrue(torch.equal(ref.e4m3_round(mid), even))
        self.assertTrue(torch.equal(ref.e4m3_round(-mid), -even))
        below = torch.from_numpy(np.nextafter((lo + hi) / 2, -np.inf))
        above = torch.from_numpy(np.nextafter((lo + hi) / 2, np.inf))
        self.assertTrue(torch.equal(ref.e4m3_round(below), torch.from_numpy(lo)))
        self.assertTrue(torch.equal(ref.e4m3_round(above), torch.from_numpy(hi)))
        hand = {1.0625: 1.0, 1.1875: 1.25, 1.07: 1.125, 2.0 ** -10: 0.0, 3 * 2.0 ** -10: 2.0 ** -8,
                2.0 ** -11: 0.0, 0.0: 0.0, 17.0: 16.0, 19.0: 20.0, 232.0: 224.0, 440.0: 448.0,
                -1.0625: -1.0, -3 * 2.0 ** -10: -(2.0 ** -8)}
        for v, want in hand.items():
            self.assertEqual(ref.e4m3_round(torch.tensor([v], dtype=ref.DT)).item(), want, v)
        sat = torch.tensor([448.0, 449.0, 464.0, 479.9, 480.0, 1e6, 1e300], dtype=ref.DT)
        self.assertEqual(ref.e4m3_round(sat).tolist(), [448.0] * 7)
        self.assertEqual(ref.e4m3_round(-sat).tolist(), [-448.0] * 7)
        # random values at every scale against safetensors_io's table encoder
        rng = np.random.default_rng(11)
        v = rng.standard_normal(200000) * 10.0 ** rng.uniform(-4, 3, 200000)
        got = ref.e4m3_round(torch.from_numpy(v)).numpy()
        np.testing.assert_array_equal(got, table[st.f32_to_e4m3_bits(v)])

    @unittest.skipUnless(hasattr(torch, "float8_e4m3fn"), "this torch has no float8_e4m3fn")
    def test_e4m3_round_matches_torch_float8(self):
        rng = np.random.default_rng(12)
        v = torch.from_numpy(rng.standard_normal(100000) * 10.0 ** rng.uniform(-4, 2.6, 100000))
        v = v.to(torch.float32).to(ref.DT)  # torch casts float64 through float32
        want = v.clamp(-448, 448).to(torch.float8_e4m3fn).to(ref.DT)
        self.assertTrue(torch.equal(ref.e4m3_round(v), want))

    def test_fp8_block_quant_scales(self):
        rng = np.random.default_rng(13)
        mags = 10.0 ** rng.uniform(-6, 4, 40)
        v = torch.from_numpy(rng.standard_normal((40, 256)) * mags[:, None])
        v[0] = 0.0                                           # all zero: amax clamps to 1e-4
        v[1, :] = 0.5 * 2.0 ** -3 * 448; v[1, 5] = 2.0 ** -3 * 448   # amax / 448 a power of two
        v[2, :128] = 1.0; v[2, 3] = -2.0 ** -3 * 448 * (1 + 1e-12)   # just above it (block 0)
        for ue8m0 in (False, True):
            q, s = ref.fp8_block_quant(v, ue8m0)
            self.assertEqual(tuple(s.shape), (40, 2))
            amax = v.view(40, 2, 128).abs().amax(-1).clamp(min=1e-4)
            if ue8m0:
                mant, _ = torch.frexp(s)
                self.assertTrue(bool((mant == 0.5).all()))       # powers of two
                self.assertTrue(bool((s >= amax / 448).all()))
                self.assertTrue(bool((s / 2 < amax / 448).all()))  # the smallest such
                self.assertEqual(s[1, 0].item(), 2.0 ** -3)
                self.assertEqual(s[2, 0].item(), 2.0 ** -2)
                self.assertEqual(s[0, 0].item(), 2.0 ** math.ceil(math.log2(1e-4 / 448)))
            else:
                self.assertTrue(torch.equal(s, amax / 448))
                # each block's largest |v| lands on +-448 (unless amax was clamped to 1e-4)
                big = v.view(40, 2, 128).abs().argmax(-1)
                top = q.view(40, 2, 128).gather(-1, big[..., None]).abs()[..., 0]
                real = v.view(40, 2, 128).abs().amax(-1) >= 1e-4
                self.assertGreater(int(real.sum()), 40)
                self.assertTrue(bool((top[real] == 448).all()))
                self.assertTrue(bool((top[~real] < 448).all()))
            self.assertLessEqual(float(q.abs().max()), 448.0)
            blocks = (v.view(40, 2, 128) / s[..., None]).clamp(-448, 448)
            self.assertTrue(torch.equal(q, ref.e4m3_round(blocks).view(40, 256)))
            for row in (0, 1, 7, 39):
                nq, ns = naive_fp8_block(v[row].tolist(), ue8m0)
                self.assertEqual(q[row].tolist(), nq)
                self.assertEqual(s[row].tolist(), ns)
        with self.assertRaises(ValueError):
            ref.fp8_block_quant(torch.zeros(2, 96, dtype=ref.DT), False)

    def test_rope_halves(self):
        torch.manual_seed(1)
        t, h, d = 7, 3, 16
        ang = torch.arange(t, dtype=ref.DT)[:, None] * torch.rand(d // 2, dtype=ref.DT)[None]
        cos, sin = torch.cos(ang), torch.sin(ang)
        x = torch.randn(t, h, d, dtype=ref.DT)
        # rotate-half (HF's rotate_half without the permute) is the same rotation
        emb_cos, emb_sin = torch.cat((cos, cos), -1)[:, None], torch.cat((sin, sin), -1)[:, None]
        want = x * emb_cos + hf_rotate_half(x) * emb_sin
        self.assertTrue(torch.allclose(ref.apply_rope_halves(x, cos, sin), want, atol=1e-14))
        self.assertTrue(torch.allclose(ref.apply_rope_halves(x[:, 0], cos, sin), want[:, 0],
                                       atol=1e-14))

    def test_select_ties_lower_position_first(self):
        big = 100.0  # above the diagonal: ignored
        scores = torch.tensor([[1, big, big, big, big, big],
                               [0, 0, big, big, big, big],
                               [3, 1, 2, big, big, big],
                               [3, 1, 2, 0, big, big],
                               [5, 5, 5, 5, 5, big],
                               [1, 2, 2, 2, 0, 2]], dtype=ref.DT)
        sel, gaps = ref.select_top(scores, 3)
        got = {t: set(torch.nonzero(sel[t]).flatten().tolist()) for t in range(6)}
        self.assertEqual(got, {0: {0}, 1: {0, 1}, 2: {0, 1, 2}, 3: {0, 1, 2}, 4: {0, 1, 2},
                               5: {1, 2, 3}})
        self.assertEqual(gaps, {3: 1 / 3, 4: 0.0, 5: 0.0})
        sel, gaps = ref.select_top(scores, 6)
        self.assertTrue(torch.equal(sel, torch.ones(6, 6, dtype=torch.bool).tril()))
        self.assertEqual(gaps, {})
        rng = np.random.default_rng(14)
        for k in (1, 2, 5):
            sc = torch.from_numpy(rng.integers(-3, 3, (30, 30)).astype(np.float64))  # many ties
            sel, _ = ref.select_top(sc, k)
            d = {(t, s_): float(sc[t, s_]) for t in range(30) for s_ in range(t + 1)}
            want = naive_select(d, 30, k)
            for t in range(30):
                self.assertEqual(set(torch.nonzero(sel[t]).flatten().tolist()), want[t], (k, t))

    def test_blocked_scores_d256_against_loops(self):
        # index_head_dim 256: two FP8 blocks per head and key (the general form of step 6)
        cfg = {"hidden_size": 24, "q_lora_rank": 16, "index_n_heads": 3, "index_head_dim": 256,
               "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "index_topk": 3,
               "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None}
        rng = np.random.default_rng(15)
        a, ix = "model.layers.0.self_attn", "model.layers.0.self_attn.indexer"
        wts = {"model.layers.0.input_layernorm.weight": 1 + 0.1 * rng.standard_normal(24),
               a + ".q_a_proj.weight": rng.standard_normal((16, 24)) / 5,
               a + ".q_a_layernorm.weight": 1 + 0.1 * rng.standard_normal(16),
               ix + ".wq_b.weight": rng.standard_normal((3 * 256, 16)) / 4,
               ix + ".wk.weight": rng.standard_normal((256, 24)) / 5,
               ix + ".k_norm.weight": 1 + 0.1 * rng.standard_normal(256),
               ix + ".k_norm.bias": 0.02 * rng.standard_normal(256),
               ix + ".weights_proj.weight": rng.standard_normal((3, 24)) / 5}
        for ue8m0 in (False, True):
            c = dict(cfg, quantization_config={"scale_fmt": "ue8m0"} if ue8m0 else None)
            m = stub_model(c, wts)
            m.inv_freq, m.cs_mul, m.softmax_scale = ref.rope_params(c)
            h_in = torch.from_numpy(rng.standard_normal((9, 24)))
            scores = m.indexer_scores(0, m.rms(h_in, "model.layers.0.input_layernorm"))
            want = naive_indexer(m, 0, h_in)
            top = max(abs(v) for v in want.values())
            for (t, s_), v in want.items():
                self.assertLess(abs(float(scores[t, s_]) - v), 1e-12 * top, (ue8m0, t, s_))
            self.assertTrue(bool(torch.isinf(scores[torch.ones(9, 9).triu(1).bool()]).all()))


class DsaModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for dtype in ("bf16", "fp8"):
            d = os.path.join(cls.tmp.name, f"v32-{dtype}")
            mrc.write_random_checkpoint(d, "v32", dtype, seed=0)
            cls.dirs[dtype] = d

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_checkpoint(self):
        fp8, bf16 = st.Checkpoint(self.dirs["fp8"]), st.Checkpoint(self.dirs["bf16"])
        with open(os.path.join(self.dirs["fp8"], "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["model_type"], cfg["architectures"], cfg["index_topk"],
                          cfg["index_n_heads"], cfg["index_head_dim"]),
                         ("deepseek_v32", ["DeepseekV32ForCausalLM"], 16, 8, 128))
        self.assertEqual(cfg["quantization_config"]["scale_fmt"], "ue8m0")
        with open(os.path.join(self.dirs["bf16"], "config.json")) as f:
            self.assertNotIn("quantization_config", json.load(f))
        for l in range(4):  # 3 layers and the MTP module's
            ix = f"model.layers.{l}.self_attn.indexer"
            want = {".wq_b.weight": ("F8_E4M3", (1024, 96)), ".wk.weight": ("F8_E4M3", (128, 192)),
                    ".wq_b.weight_scale_inv": ("F32", (8, 1)),
                    ".wk.weight_scale_inv": ("F32", (1, 2)),
                    ".k_norm.weight": ("BF16", (128,)), ".k_norm.bias": ("F32", (128,)),
                    ".weights_proj.weight": ("BF16", (8, 192))}
            for suffix, (dt, shape) in want.items():
                self.assertEqual((fp8.dtype(ix + suffix), fp8.get(ix + suffix).shape), (dt, shape))
            self.assertEqual(bf16.dtype(ix + ".wq_b.weight"), "BF16")
            self.assertEqual(bf16.dtype(ix + ".k_norm.bias"), "F32")
            self.assertFalse(bf16.has(ix + ".wq_b.weight_scale_inv"))
            bias = bf16.get(ix + ".k_norm.bias")
            self.assertTrue(0.01 < float(bias.std()) < 0.03)
        self.assertFalse([n for n in mrc.tensor_shapes(mrc.make_config("v3")) if "indexer" in n])

    def test_dense_when_topk_covers_the_sequence(self):
        ids = IDS20[:12]
        for dtype, d in self.dirs.items():
            for kw in ({}, {"fast": True}, {"requant": "int8"}):
                dsa, dense = ref.Model(d, **kw), ref.Model(d, dense_attention=True, **kw)
                for k in (16, 12):  # index_topk >= T, and == T
                    dsa.cfg["index_topk"] = k
                    self.assertTrue(torch.equal(dsa.forward(ids), dense.forward(ids)), (dtype, kw, k))
                    self.assertTrue(torch.equal(dsa.mtp_logits(ids), dense.mtp_logits(ids)))
                self.assertEqual(dsa.index_gaps, {})
                self.assertTrue(any(".indexer." in n for n in dsa._w))   # the indexer ran
                self.assertFalse(any(".indexer." in n for n in dense._w))  # and was ignored

    def test_small_topk_differs_and_matches_brute_force(self):
        for dtype, d in self.dirs.items():
            dsa, dense = ref.Model(d), ref.Model(d, dense_attention=True)
            dsa.cfg["index_topk"] = 4
            a, b = dsa.forward(IDS20), dense.forward(IDS20)
            err = float((a - b).abs().max() / b.abs().max())
            self.assertGreater(err, 1e-2, dtype)
            # positions 0-3 have <= 4 positions: the same attention
            self.assertLess(float((a[:4] - b[:4]).abs().max() / b.abs().max()), 1e-12)
            self.assertGreater(float((dsa.mtp_logits(IDS20) - dense.mtp_logits(IDS20)).abs().max()),
                               0)
            for l, h_in in ((1, layer_input(dsa, IDS20, 1)), (3, layer_input(dsa, IDS20, 2))):
                xn = dsa.rms(h_in, f"model.layers.{l}.input_layernorm")
                scores = dsa.indexer_scores(l, xn)
                sel, gaps = ref.select_top(scores, 4)
                self.assertTrue(torch.equal(sel, dsa.dsa_selected(l, xn)))
                self.assertEqual(sel.sum(-1).tolist(), [min(4, t + 1) for t in range(20)])
                self.assertFalse(torch.equal(sel, torch.ones(20, 20, dtype=torch.bool).tril()))
                want = naive_indexer(dsa, l, h_in)
                top = max(abs(v) for v in want.values())
                for (t, s_), v in want.items():
                    self.assertLess(abs(float(scores[t, s_]) - v), 1e-11 * top, (dtype, l, t, s_))
                naive = naive_select(want, 20, 4)
                compared = 0
                for t in range(20):
                    if gaps.get(t, 1.0) < 1e-9:
                        continue  # a near tie: float order may decide it either way
                    self.assertEqual(set(torch.nonzero(sel[t]).flatten().tolist()), naive[t],
                                     (dtype, l, t))
                    compared += 1
                self.assertGreaterEqual(compared, 19)

    def test_cli_dense_flag_and_selection_gaps(self):
        prompt, n = IDS20, 2
        with tempfile.TemporaryDirectory() as out:
            res = {}
            for flag in ([], ["--dense-attention"]):
                lpath, tpath = os.path.join(out, "l.npy"), os.path.join(out, "t.json")
                cmd = [PY, os.path.join(HERE, "reference.py"), "--model", self.dirs["fp8"],
                       "--max-tokens", str(n), "--logits-out", lpath, "--tokens-out", tpath,
                       "--prompt-ids", ",".join(map(str, prompt)), "--prompt-ids", "5,6,7"] + flag
                err = subprocess.run(cmd, check=True, capture_output=True, text=True).stderr
                with open(tpath) as f:
                    res[bool(flag)] = (np.load(lpath), json.load(f)["tokens"], err)
            (dsa_l, dsa_t, dsa_err), (dense_l, dense_t, dense_err) = res[False], res[True]
            self.assertRegex(dsa_err, r"sequence 0: smallest index top-16 gap \(score_16 - "
                                      r"score_17\)/max\|score\| \S+ at layer \d position \d+ "
                                      r"\(of 15 selections\)")  # positions 16-20, 3 layers
            self.assertIn("sequence 1: no index selection", dsa_err)
            self.assertNotIn("index", dense_err)
            self.assertFalse(np.array_equal(dsa_l[0], dense_l[0]))
            np.testing.assert_array_equal(dsa_l[1], dense_l[1])  # 3-5 positions: dense anyway
            for dense, logits, toks in ((False, dsa_l, dsa_t), (True, dense_l, dense_t)):
                full = ref.Model(self.dirs["fp8"], dense_attention=dense).forward(
                    prompt + toks[0]).numpy()
                np.testing.assert_allclose(logits[0], full[len(prompt) - 1:len(prompt) - 1 + n],
                                           rtol=1e-6)


if __name__ == "__main__":
    unittest.main()
