#include "kernels/membw.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "base/timer.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/membw.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of p[0 .. n), read as four interleaved sequential streams (the quarters of the range in
// lock-step): one stream per thread leaves memory-level parallelism unused and underestimates
// what a kernel reading several weight rows at once achieves.
float SumRange(const float* p, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t q = n / 4 / N * N;
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  for (int64_t i = 0; i < q; i += N) {
    a0 = hn::Add(a0, hn::LoadU(df, p + i));
    a1 = hn::Add(a1, hn::LoadU(df, p + q + i));
    a2 = hn::Add(a2, hn::LoadU(df, p + 2 * q + i));
    a3 = hn::Add(a3, hn::LoadU(df, p + 3 * q + i));
  }
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (int64_t i = 4 * q; i < n; ++i) s += p[i];
  return s;
}

// a[i] = b[i] + s * c[i].
void Triad(float* a, const float* b, const float* c, float s, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto sv = hn::Set(df, s);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::MulAdd(sv, hn::LoadU(df, c + i), hn::LoadU(df, b + i)), df, a + i);
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace epserve::kernels {

HWY_EXPORT(SumRange);
HWY_EXPORT(Triad);

BandwidthResult MeasureBandwidth(const BandwidthOptions& opt, ThreadPool& pool) {
  BandwidthResult r;
  const int64_t n = opt.bytes / 4;
  std::unique_ptr<float[]> buf(new float[n]);
  // First touch by the threads that will read it.
  pool.ParallelFor(n, 4096,
                   [&](size_t b, size_t e, int) { std::fill(buf.get() + b, buf.get() + e, 1.0f); });
  const auto sum_range = HWY_DYNAMIC_DISPATCH(SumRange);
  const auto triad = HWY_DYNAMIC_DISPATCH(Triad);
  std::vector<float> sink(pool.num_threads() * 16);
  for (int rep = 0; rep < opt.repeats; ++rep) {
    double t0 = NowSeconds();
    pool.ParallelFor(n, 4096, [&](size_t b, size_t e, int t) {
      sink[t * 16] += sum_range(buf.get() + b, e - b);
    });
    double dt = NowSeconds() - t0;
    r.read_gbps = std::max(r.read_gbps, opt.bytes / dt / 1e9);
  }
  buf.reset();
  const int64_t m = n / 4;
  std::unique_ptr<float[]> a(new float[m]), b(new float[m]), c(new float[m]);
  pool.ParallelFor(m, 4096, [&](size_t lo, size_t hi, int) {
    std::fill(a.get() + lo, a.get() + hi, 0.0f);
    std::fill(b.get() + lo, b.get() + hi, 1.0f);
    std::fill(c.get() + lo, c.get() + hi, 2.0f);
  });
  for (int rep = 0; rep < opt.repeats; ++rep) {
    double t0 = NowSeconds();
    pool.ParallelFor(m, 4096, [&](size_t lo, size_t hi, int) {
      triad(a.get() + lo, b.get() + lo, c.get() + lo, 3.0f, hi - lo);
    });
    double dt = NowSeconds() - t0;
    r.triad_gbps = std::max(r.triad_gbps, 3.0 * m * 4 / dt / 1e9);
  }
  // Keep the compiler from dropping the reads.
  volatile float keep = sink[0] + a[m / 2];
  (void)keep;
  return r;
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
