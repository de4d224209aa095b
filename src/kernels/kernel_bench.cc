#include "kernels/kernel_bench.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "base/timer.h"
#include "hwy/highway.h"
#include "kernels/kernel_bench_cases.h"
#include "kernels/matmul.h"

namespace epserve::kernels {

namespace {

std::string Shape(int64_t m, int64_t n, int64_t k) {
  return "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
}

// OpenBLAS sgemm y = x W^T on the dequantized weight, best of `repeats`.
double BlasSeconds(const BenchWeight& w, const std::vector<float>& x, int64_t m,
                   std::vector<float>& y, int repeats, int threads) {
  std::vector<float> wf(w.view.rows * w.view.cols);
  for (int64_t r = 0; r < w.view.rows; ++r)
    DequantizeRow(w.view, r, 0, w.view.cols, &wf[r * w.view.cols]);
  openblas_set_num_threads(threads);
  const int M = static_cast<int>(m), N = static_cast<int>(w.view.rows),
            K = static_cast<int>(w.view.cols);
  return BestSeconds(repeats, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data(), K, wf.data(), K,
                0.0f, y.data(), N);
  });
}

void AddMatMulRows(const KernelBenchOptions& opt, ThreadPool& pool,
                   std::vector<KernelBenchRow>& rows) {
  const int repeats = opt.quick ? 2 : opt.repeats;
  for (DType dtype : {DType::kF8E4M3, DType::kBF16}) {
    // Decode: a square-ish matrix of decode_weight_bytes, streamed once per call.
    const int64_t elems = opt.decode_weight_bytes / static_cast<int64_t>(DTypeSize(dtype));
    int64_t k = 1;
    while (k * k * 2 <= elems) k *= 2;  // k = largest power of two with k * 2k <= elems, or k*k
    const int64_t n = elems / k;
    // Successive calls cycle through copies totalling >= 256 MB, so no call finds its weights
    // in the last-level cache.
    const int copies = opt.quick
                           ? 1
                           : static_cast<int>(std::max<int64_t>(
                                 1, ((int64_t{256} << 20) - 1) / opt.decode_weight_bytes + 1));
    std::vector<BenchWeight> ws;
    for (int c = 0; c < copies; ++c) ws.push_back(MakeBenchWeight(dtype, n, k, 1 + c));
    for (int m : opt.decode_rows) {
      std::vector<float> x = BenchVector(m * k, 2), y(m * n);
      KernelBenchRow r{.kernel = "matmul",
                       .dtype = BenchDTypeName(dtype),
                       .shape = Shape(m, n, k),
                       .regime = "memory"};
      r.bytes = static_cast<double>(ws[0].view.Bytes()) + 4.0 * m * (n + k);
      r.flops = 2.0 * m * n * k;
      int call = 0;
      r.seconds = BestSeconds(repeats * copies, [&] {
        MatMul({.x = x.data(), .num_rows = m, .w = ws[call++ % copies].view, .y = y.data()}, pool);
      });
      rows.push_back(r);
    }
    // Prefill: compute bound; compared with OpenBLAS on the dequantized weight.
    const int64_t d = opt.quick ? 1024 : opt.prefill_dim;
    BenchWeight pw = MakeBenchWeight(dtype, d, d, 3);
    for (int m : opt.prefill_rows) {
      if (opt.quick) m = std::min(m, 64);
      std::vector<float> x = BenchVector(m * d, 4), y(m * d);
      KernelBenchRow r{.kernel = "matmul",
                       .dtype = BenchDTypeName(dtype),
                       .shape = Shape(m, d, d),
                       .regime = "compute"};
      r.bytes = static_cast<double>(pw.view.Bytes()) + 4.0 * m * 2 * d;
      r.flops = 2.0 * m * d * d;
      r.seconds = BestSeconds(repeats, [&] {
        MatMul({.x = x.data(), .num_rows = m, .w = pw.view, .y = y.data()}, pool);
      });
      const double blas = BlasSeconds(pw, x, m, y, repeats, pool.num_threads());
      r.blas_gflops = r.flops / blas / 1e9;
      rows.push_back(r);
    }
  }
}

std::string DispatchedTargetName() {
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return targets ? hwy::TargetName(targets & -targets) : "none";
}

}  // namespace

double BestSeconds(int repeats, const std::function<void()>& fn) {
  fn();  // warm-up: page faults, dispatch, caches
  double best = 1e30;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const double t0 = NowSeconds();
    fn();
    best = std::min(best, NowSeconds() - t0);
  }
  return best;
}

KernelBenchResult RunKernelBench(const KernelBenchOptions& opt, ThreadPool& pool) {
  KernelBenchResult result;
  result.threads = pool.num_threads();
  result.simd_target = DispatchedTargetName();
  // The probe runs before and between the cases and the best result counts: on a shared
  // machine, kernels and probe are then both judged by their quietest moments.
  const BandwidthOptions probe{.bytes = static_cast<int64_t>(opt.bandwidth_gib * (1 << 30)),
                               .repeats = opt.quick ? 2 : 5};
  auto measure = [&] {
    const BandwidthResult b = MeasureBandwidth(probe, pool);
    result.bandwidth.read_gbps = std::max(result.bandwidth.read_gbps, b.read_gbps);
    result.bandwidth.triad_gbps = std::max(result.bandwidth.triad_gbps, b.triad_gbps);
  };
  measure();
  AddMatMulRows(opt, pool, result.rows);
  measure();
  AddGroupedMlpRows(opt, pool, result.rows);
  AddAttentionRows(opt, pool, result.rows);
  AddSiluQuantRows(opt, pool, result.rows);
  measure();
  for (auto& r : result.rows) {
    r.gbps = r.bytes / r.seconds / 1e9;
    r.fraction_of_read_bandwidth = r.gbps / result.bandwidth.read_gbps;
    r.gflops = r.flops / r.seconds / 1e9;
    r.fraction_of_blas = r.blas_gflops > 0 ? r.gflops / r.blas_gflops : 0;
  }
  return result;
}

}  // namespace epserve::kernels
