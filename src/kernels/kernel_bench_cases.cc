#include "kernels/kernel_bench_cases.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/grouped_gemm.h"
#include "kernels/mla_attention.h"
#include "kernels/quant_silu.h"

namespace epserve::kernels {

namespace {
// xorshift64*: fast, reproducible, good enough for benchmark data.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  float Normalish() {  // sum of uniforms, mean 0, variance 1
    const uint64_t v = Next();
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += static_cast<float>((v >> (16 * i)) & 0xffff) / 65536.0f;
    return (sum - 2.0f) * 1.7320508f;
  }
};
}  // namespace

const char* BenchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "fp8";
    case DType::kI8Packed:
      return "int8";
    case DType::kF4E2M1:
      return "fp4";
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kI32:
    case DType::kI64:
      break;  // never benchmarked: not a weight dtype
  }
  return "?";
}

BenchWeight MakeBenchWeight(DType dtype, int64_t n, int64_t k, uint64_t seed) {
  BenchWeight w;
  Rng rng{seed * 0x9E3779B97F4A7C15ULL + 1};
  const int64_t elems = n * k;
  w.bytes.resize(elems * DTypeSize(dtype));
  if (dtype == DType::kF8E4M3) {
    for (int64_t i = 0; i < elems; i += 8) {
      uint64_t v = rng.Next();
      for (int64_t j = i; j < std::min(elems, i + 8); ++j, v >>= 8) {
        uint8_t b = static_cast<uint8_t>(v) & 0xf7;  // exponent <= 14 keeps values moderate
        w.bytes[j] = (b & 0x7f) == 0x7f ? 0 : b;
      }
    }
  } else if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < elems; ++i) {
      const uint16_t b = F32ToBf16(rng.Normalish() * 0.05f);
      std::memcpy(&w.bytes[2 * i], &b, 2);
    }
  } else {
    for (int64_t i = 0; i < elems; ++i) {
      const float f = rng.Normalish() * 0.05f;
      std::memcpy(&w.bytes[4 * i], &f, 4);
    }
  }
  w.view = WeightView{.dtype = dtype, .rows = n, .cols = k, .data = w.bytes.data()};
  if (dtype == DType::kF8E4M3) {
    w.scale.assign(w.view.ScaleRows() * w.view.ScaleCols(), 1e-3f);
    w.view.scale = w.scale.data();
  }
  return w;
}

std::vector<float> BenchVector(int64_t n, uint64_t seed) {
  Rng rng{seed * 0x9E3779B97F4A7C15ULL + 7};
  std::vector<float> v(n);
  for (auto& x : v) x = rng.Normalish();
  return v;
}

namespace {

// Expert-major routing of `tokens` tokens to top_k distinct experts each; rotated by `shift`
// so consecutive calls touch different experts (weights come from memory, not cache).
std::vector<int64_t> RouteOffsets(int num_experts, int tokens, int top_k, uint64_t seed,
                                  int* touched) {
  Rng rng{seed * 0x9E3779B97F4A7C15ULL + 3};
  std::vector<int64_t> counts(num_experts, 0);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> chosen;
    while (static_cast<int>(chosen.size()) < top_k) {
      const int e = static_cast<int>(rng.Next() % num_experts);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int e : chosen) counts[e]++;
  }
  std::vector<int64_t> offsets(num_experts + 1, 0);
  *touched = 0;
  for (int e = 0; e < num_experts; ++e) {
    offsets[e + 1] = offsets[e] + counts[e];
    *touched += counts[e] > 0 ? 1 : 0;
  }
  return offsets;
}

}  // namespace

void AddGroupedMlpRows(const KernelBenchOptions& opt, ThreadPool& pool,
                       std::vector<KernelBenchRow>& rows) {
  // The bench model's MoE layer: 256 experts, hidden 1024, width 512, top-8.
  const int num_experts = opt.quick ? 32 : 256, top_k = 8;
  const int64_t hidden = 1024, inter = 512;
  const int repeats = opt.quick ? 2 : opt.repeats;
  for (DType dtype : {DType::kF8E4M3, DType::kBF16}) {
    std::vector<BenchWeight> store;
    store.reserve(3 * num_experts);
    std::vector<ExpertMlpWeights> experts(num_experts);
    for (int e = 0; e < num_experts; ++e) {
      store.push_back(MakeBenchWeight(dtype, inter, hidden, 100 + 3 * e));
      store.push_back(MakeBenchWeight(dtype, inter, hidden, 101 + 3 * e));
      store.push_back(MakeBenchWeight(dtype, hidden, inter, 102 + 3 * e));
      experts[e] = {store[3 * e].view, store[3 * e + 1].view, store[3 * e + 2].view};
    }
    const double expert_bytes = static_cast<double>(
        experts[0].gate.Bytes() + experts[0].up.Bytes() + experts[0].down.Bytes());
    for (int tokens : {1, 32}) {
      // Several routings, cycled through by successive calls.
      constexpr int kRoutings = 8;
      std::vector<std::vector<int64_t>> offsets;
      double touched_sum = 0;
      for (int i = 0; i < kRoutings; ++i) {
        int touched = 0;
        offsets.push_back(RouteOffsets(num_experts, tokens, top_k, 17 + i, &touched));
        touched_sum += touched;
      }
      const int64_t slots = int64_t{tokens} * top_k;
      std::vector<float> x = BenchVector(slots * hidden, 5), h(slots * inter), out(slots * hidden);
      int call = 0;
      KernelBenchRow r{.kernel = "grouped_mlp", .dtype = BenchDTypeName(dtype), .regime = "memory"};
      r.shape = "tokens=" + std::to_string(tokens) +
                " top_k=8 experts=" + std::to_string(num_experts) + " hidden=1024 inter=512";
      // Time kRoutings calls (one per routing) and report the mean: fair to every routing.
      const double t = BestSeconds(repeats, [&] {
        for (int i = 0; i < kRoutings; ++i, ++call)
          GroupedMlp({.num_groups = num_experts,
                      .experts = experts.data(),
                      .offsets = offsets[call % kRoutings].data(),
                      .x = x.data(),
                      .h = h.data(),
                      .out = out.data()},
                     pool);
      });
      r.seconds = t / kRoutings;
      const double touched = touched_sum / kRoutings;
      r.bytes = touched * expert_bytes + 4.0 * slots * (2 * hidden + 2 * inter);
      r.flops = 2.0 * slots * 3 * hidden * inter;
      r.shape += " touched=" + std::to_string(static_cast<int>(touched + 0.5));
      rows.push_back(r);
    }
  }
}

void AddAttentionRows(const KernelBenchOptions& opt, ThreadPool& pool,
                      std::vector<KernelBenchRow>& rows) {
  const int H = 16, L = 512, R = 64;
  const int64_t T = opt.quick ? 2 : 8, len = opt.quick ? 1024 : 8192;
  std::vector<float> cache = BenchVector(T * len * (L + R), 9);
  // One block per sequence (contiguous rows), as a paged cache with len-sized blocks.
  std::vector<int32_t> block_ids(T);
  std::vector<const int32_t*> tables(T);
  std::vector<int64_t> pos(T, len - 1);
  for (int64_t t = 0; t < T; ++t) {
    block_ids[t] = static_cast<int32_t>(t);
    tables[t] = &block_ids[t];
  }
  std::vector<float> qa = BenchVector(T * H * L, 10), qp = BenchVector(T * H * R, 11),
                     out(T * H * L);
  KernelBenchRow r{.kernel = "mla_attention", .dtype = "f32", .regime = "memory"};
  r.shape = "seqs=" + std::to_string(T) + " len=" + std::to_string(len) + " heads=16 L=512 R=64";
  r.seconds = BestSeconds(opt.quick ? 2 : opt.repeats, [&] {
    MlaAttention({.num_tokens = T,
                  .num_heads = H,
                  .kv_lora_rank = L,
                  .rope_dim = R,
                  .q_abs = qa.data(),
                  .q_pe = qp.data(),
                  .cache = {.base = cache.data(), .block_stride = len * (L + R), .block_size = len},
                  .token_blocks = tables.data(),
                  .token_pos = pos.data(),
                  .softmax_scale = 0.05f,
                  .out = out.data()},
                 pool);
  });
  r.bytes = 4.0 * T * len * (L + R) + 4.0 * T * H * (2 * L + R);
  r.flops = 2.0 * T * H * len * (L + R + L);
  rows.push_back(r);
}

void AddSiluQuantRows(const KernelBenchOptions& opt, ThreadPool& pool,
                      std::vector<KernelBenchRow>& rows) {
  const int64_t n_rows = opt.quick ? 256 : 4096, len = 2048;
  std::vector<float> g = BenchVector(n_rows * len, 12), u = BenchVector(n_rows * len, 13);
  std::vector<uint8_t> q(n_rows * len);
  std::vector<float> scales(n_rows * len / 128);
  KernelBenchRow r{.kernel = "silu_mul_quant_fp8", .dtype = "f32", .regime = "memory"};
  r.shape = "rows=" + std::to_string(n_rows) + " len=2048";
  r.seconds = BestSeconds(opt.quick ? 2 : opt.repeats, [&] {
    SiluMulQuantFp8({.gate = g.data(),
                     .up = u.data(),
                     .num_rows = n_rows,
                     .row_len = len,
                     .q = q.data(),
                     .scales = scales.data()},
                    pool);
  });
  r.bytes = 8.0 * n_rows * len + n_rows * len + 4.0 * scales.size();
  r.flops = 0;
  rows.push_back(r);
}

}  // namespace epserve::kernels
