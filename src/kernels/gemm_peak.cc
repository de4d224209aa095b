#include "kernels/gemm_peak.h"

#include <algorithm>
#include <vector>

#include "kernels/kernel_bench_cases.h"
#include "kernels/matmul.h"
#include "tensor/weight_view.h"

namespace epserve::kernels {

double MeasureGemmPeakGflops(const GemmPeakOptions& o, ThreadPool& pool) {
  const int64_t m = std::max(1, o.rows), d = std::max(16, o.dim);
  std::vector<uint16_t> w(d * d);
  std::vector<float> x(m * d), y(m * d);
  for (int64_t i = 0; i < d * d; ++i) w[i] = F32ToBf16(static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f);
  for (int64_t i = 0; i < m * d; ++i) x[i] = static_cast<float>((i * 104729) % 89) / 89.0f - 0.5f;
  const MatMulArgs args{.x = x.data(), .num_rows = m,
                        .w = WeightView{.dtype = DType::kBF16, .rows = d, .cols = d, .data = w.data()},
                        .y = y.data()};
  const double best = BestSeconds(o.repeats, [&] { MatMul(args, pool); });
  return 2.0 * static_cast<double>(m) * d * d / best / 1e9;
}

}  // namespace epserve::kernels
