"""Unit tests of reference_v4.py's own math (docs/v4-model.md), on hand-made cases.

  cd tests/reference && /usr/bin/python3 v4_self_test.py
"""
import math
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_v4 as R  # noqa: E402
from v4_checkpoint import quant_fp4, quant_fp8, write_tiny_v4  # noqa: E402

DT = torch.float64


class Fp4(unittest.TestCase):
    def test_decode_table(self):
        # nibble n -> value; byte j: low nibble = input 2j, high nibble = input 2j+1
        packed = np.array([[0x10 | 0x0, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]],
                          dtype=np.uint8).view(np.int8)
        scale = np.array([[127]], dtype=np.uint8)          # 2^0
        v = R.fp4_unpack(packed, scale, block=32)
        want = [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]
        self.assertEqual(v.shape, (1, 16))
        self.assertEqual(v[0].tolist(), want)
        self.assertTrue(np.signbit(v[0, 8]))

    def test_scale_per_32(self):
        packed = np.full((1, 32), 0x22, dtype=np.uint8).view(np.int8)   # every value 1.0
        scale = np.array([[128, 125]], dtype=np.uint8)                  # 2^1, 2^-2
        v = R.fp4_unpack(packed, scale)
        self.assertEqual(v[0, :32].tolist(), [2.0] * 32)
        self.assertEqual(v[0, 32:].tolist(), [0.25] * 32)

    def test_e2m1_round_ties_to_even(self):
        x = torch.tensor([0.2, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 6.0, -0.75, -2.5],
                         dtype=DT)
        want = [0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -1.0, -2.0]
        self.assertEqual(R.e2m1_round(x).tolist(), want)

    def test_q4_block(self):
        v = torch.zeros(32, dtype=DT)
        v[0], v[1], v[2] = 3.0, 0.7, -0.2
        # amax 3 -> s = 2^ceil(log2(3/6)) = 0.5; 3/0.5 = 6, 0.7/0.5 = 1.4 -> 1.5, -0.4 -> -0.5
        out = R.q4(v)
        self.assertEqual(out[:3].tolist(), [3.0, 0.75, -0.25])
        self.assertEqual(out[3:].abs().sum().item(), 0.0)

    def test_writer_roundtrip(self):
        rng = np.random.default_rng(3)
        w = rng.standard_normal((4, 64))
        packed, scale, deq = quant_fp4(w)
        self.assertTrue(np.array_equal(R.fp4_unpack(packed, scale), deq))
        s = np.repeat(np.ldexp(1.0, scale.astype(np.int64) - 127), 32, 1)
        self.assertTrue(np.array_equal(R.e2m1_round(torch.from_numpy(np.clip(w / s, -6, 6)))
                                       .numpy() * s, deq))


class Fp8(unittest.TestCase):
    def test_q8_ue8m0_scale(self):
        v = torch.zeros(64, dtype=DT)
        v[0], v[1] = 1.0, 0.3
        # amax 1 -> s = 2^ceil(log2(1/448)) = 2^-8; 0.3 * 256 = 76.8 -> e4m3 80 (step 8 in [64,128))
        out = R.q8(v, 64)
        self.assertEqual(out[0].item(), 1.0)
        self.assertEqual(out[1].item(), 80.0 / 256)

    def test_pow2_ceil(self):
        x = torch.tensor([1.0, 1.5, 0.25, 0.3, 448.0 / 448], dtype=DT)
        self.assertEqual(R.pow2_ceil(x).tolist(), [1.0, 2.0, 0.25, 0.5, 1.0])

    def test_block_dequant_with_ue8m0(self):
        rng = np.random.default_rng(4)
        w = rng.standard_normal((130, 200)) * 0.05
        codes, scale, deq = quant_fp8(w)
        self.assertEqual(scale.shape, (2, 2))
        with tempfile.TemporaryDirectory() as d:
            from safetensors_io import write_checkpoint
            write_checkpoint(d, {"a.weight": ("F8_E4M3", codes), "a.scale": ("F8_E8M0", scale)})
            ck = R.V4Checkpoint(d)
            self.assertTrue(np.array_equal(ck.get_f64("a.weight"), deq))
        self.assertLess(np.abs(deq - w).max(), 0.05 * 2 ** -3 * 8)


class Sinkhorn(unittest.TestCase):
    def test_doubly_stochastic_and_split(self):
        hc = 4
        g = torch.Generator().manual_seed(0)
        m = torch.randn(3, (2 + hc) * hc, generator=g, dtype=DT)
        scale = torch.tensor([0.7, 1.3, 2.0], dtype=DT)
        base = torch.randn((2 + hc) * hc, generator=g, dtype=DT)
        pre, post, comb = R.sinkhorn_split(m, scale, base, hc, 20, 1e-6)
        self.assertTrue(torch.allclose(pre, torch.sigmoid(m[:, :hc] * 0.7 + base[:hc]) + 1e-6))
        self.assertTrue(torch.allclose(post, 2 * torch.sigmoid(m[:, hc:2 * hc] * 1.3
                                                               + base[hc:2 * hc])))
        # the last step normalises columns: column sums ~ 1 - eps; rows close to 1
        self.assertTrue(torch.allclose(comb.sum(-2), torch.ones(3, hc, dtype=DT), atol=1e-5))
        self.assertTrue(torch.allclose(comb.sum(-1), torch.ones(3, hc, dtype=DT), atol=1e-3))

    def test_one_iteration_by_hand(self):
        hc = 2
        m = torch.zeros(1, (2 + hc) * hc, dtype=DT)
        base = torch.zeros((2 + hc) * hc, dtype=DT)
        base[2 * hc:] = torch.tensor([math.log(3.0), 0.0, 0.0, 0.0], dtype=DT)
        _, _, comb = R.sinkhorn_split(m, torch.ones(3, dtype=DT), base, hc, 1, 0.0)
        # row softmax: [[3/4, 1/4], [1/2, 1/2]]; then columns / column sums (5/4, 3/4)
        want = torch.tensor([[0.6, 1 / 3], [0.4, 2 / 3]], dtype=DT)
        self.assertTrue(torch.allclose(comb[0], want))


class RopeAndYarn(unittest.TestCase):
    def test_interleaved_pairs_and_inverse(self):
        x = torch.tensor([[1.0, 0.0, 0.0, 2.0]], dtype=DT)
        ang = torch.tensor([[math.pi / 2, math.pi]], dtype=DT)
        y = R.rope(x, ang)
        self.assertTrue(torch.allclose(y, torch.tensor([[0.0, 1.0, 0.0, -2.0]], dtype=DT),
                                       atol=1e-12))
        self.assertTrue(torch.allclose(R.rope(y, ang, inverse=True), x, atol=1e-12))

    def test_yarn_ramp(self):
        f0 = R.yarn_freqs(64, 160000.0, 1.0, 0, 32, 1)
        f = R.yarn_freqs(64, 160000.0, 16.0, 65536, 32, 1)
        self.assertEqual(f[0].item(), f0[0].item())                 # fastest kept
        self.assertAlmostEqual(f[-1].item(), f0[-1].item() / 16, places=15)


class Compressor(unittest.TestCase):
    """compress() on a hand-made model: D = 2, d = 1 channel (+ no rotary part)."""

    def make(self, ratio, wkv, wgate, ape):
        m = R.ModelV4.__new__(R.ModelV4)
        m.ds = False
        m.c = {"eps": 0.0, "rope_dim": 0, "compress_theta": 1.0, "rope_factor": 1.0,
               "orig_len": 0, "beta_fast": 32, "beta_slow": 1}
        m._freqs = {}
        m._w = {"p.wkv.weight": torch.tensor(wkv, dtype=DT),
                "p.wgate.weight": torch.tensor(wgate, dtype=DT),
                "p.ape": torch.tensor(ape, dtype=DT),
                "p.norm.weight": torch.ones(1, dtype=DT)}
        m.rms = lambda x, prefix: x           # look at the pooled values themselves
        m.rope_last = lambda x, ang, inverse=False: x
        return m

    def test_plain_groups(self):
        # kappa_t = a_t[0], sigma_t = a_t[1] + ape[t mod 2]; ratio 2, 5 tokens -> 2 entries
        m = self.make(2, [[1.0, 0.0]], [[0.0, 1.0]], [[0.0], [0.0]])
        a = torch.tensor([[1, 0], [3, math.log(3)], [5, 0], [7, 0], [9, 0]], dtype=DT)
        pooled = []
        orig_q8 = R.q8
        R.q8 = lambda v, b: v
        try:
            e = m.compress(a, "p", 2, 1, False)
        finally:
            R.q8 = orig_q8
        # group 0: weights softmax(0, log 3) = (1/4, 3/4) -> 1/4 + 9/4 = 2.5; group 1: 6
        self.assertEqual(e.shape, (2, 1))
        self.assertAlmostEqual(e[0, 0].item(), 2.5, places=12)
        self.assertAlmostEqual(e[1, 0].item(), 6.0, places=12)
        del pooled

    def test_overlapping_ratio4(self):
        # c = 2 channels: channel 0 feeds the next group, channel 1 the token's own group
        wkv = [[1.0, 0.0], [0.0, 1.0]]
        wgate = [[0.0, 0.0], [0.0, 0.0]]                 # equal scores: plain averages
        m = self.make(4, wkv, wgate, [[0.0, 0.0]] * 4)
        a = torch.tensor([[t, 100 + t] for t in range(9)], dtype=DT)
        orig_q8 = R.q8
        R.q8 = lambda v, b: v
        try:
            e = m.compress(a, "p", 4, 1, False)
        finally:
            R.q8 = orig_q8
        # entry 0: own-group channel-1 values 100..103 only (previous group absent)
        self.assertAlmostEqual(e[0, 0].item(), 101.5, places=12)
        # entry 1: channel 0 of tokens 0..3 (0..3) and channel 1 of tokens 4..7 (104..107)
        self.assertAlmostEqual(e[1, 0].item(), (0 + 1 + 2 + 3 + 104 + 105 + 106 + 107) / 8,
                               places=12)
        self.assertEqual(e.shape[0], 2)                   # token 8 starts an incomplete group


class TinyModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # one fp8 checkpoint (seed 2) for test_causal and test_bounded_cache_same_logits
        cls._tmp = tempfile.TemporaryDirectory()
        cls.seed2 = cls._tmp.name
        write_tiny_v4(cls.seed2, "fp8", seed=2)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_fp8_and_bf16_checkpoints_agree_exactly(self):
        with tempfile.TemporaryDirectory() as d:
            write_tiny_v4(os.path.join(d, "a"), "fp8", seed=1)
            write_tiny_v4(os.path.join(d, "b"), "bf16", seed=1)
            ids = [3, 17, 99, 4, 250, 8, 9, 10, 11, 12, 13, 14, 15, 16, 400, 2, 7]
            la = R.ModelV4(os.path.join(d, "a")).forward(ids, last_only=True)
            lb = R.ModelV4(os.path.join(d, "b")).forward(ids, last_only=True)
            self.assertTrue(torch.equal(la, lb))
            self.assertTrue(torch.isfinite(la).all())
            ma = R.ModelV4(os.path.join(d, "a")).mtp_logits(ids)
            self.assertEqual(tuple(ma.shape), (len(ids) - 1, 512))

    def test_causal(self):
        m = R.ModelV4(self.seed2)
        ids = list(range(5, 30))
        full = m.forward(ids)
        part = m.forward(ids[:13])
        self.assertTrue(torch.allclose(full[:13], part, rtol=0, atol=1e-10))

    def test_bounded_cache_same_logits(self):
        # --cache-gb: a bound that holds only a few small weights (the rest decoded at each
        # use, routed experts always), the embedding by rows, the head by blocks of 100 rows
        # (vocab 512: a partial last block) -> the unbounded model's logits and tokens.
        d = self.seed2
        # 21 tokens: the ratio-4 layers' indexer picks 4 of 5 entries at the last queries
        ids = [3, 17, 99, 4, 250, 8, 9, 10, 11, 12, 13, 14, 15, 16, 400, 2, 7, 5, 6, 31, 44]
        full = R.ModelV4(d)
        small = R.ModelV4(d, cache_bytes=300_000)
        small.HEAD_ROWS = 100
        lf, ls = full.forward(ids), small.forward(ids)
        tol = 1e-12 * float(lf.abs().max())
        self.assertTrue(torch.equal(lf.argmax(-1), ls.argmax(-1)))
        self.assertTrue(torch.allclose(lf, ls, rtol=1e-12, atol=tol))
        self.assertTrue(torch.allclose(full.mtp_logits(ids), small.mtp_logits(ids),
                                       rtol=1e-12, atol=tol))
        self.assertLessEqual(small._cached, 300_000)
        self.assertTrue(small._w)                          # some kept ...
        self.assertLess(len(small._w), len(full._w) // 4)  # ... most not
        self.assertFalse([n for n in small._w if ".experts." in n or "embed" in n
                          or n == "head.weight"])


if __name__ == "__main__":
    unittest.main()
