"""Self-checks of the reference: formats, RoPE, YaRN, gate, absorbed-vs-expanded MLA, int8, CLI.

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

            def forward(self, seq):
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


if __name__ == "__main__":
    unittest.main()
