#include "kernels/membw.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

namespace epserve::kernels {

namespace {
double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

float SumRange(const float* p, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  float s = 0;
  for (int j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += p[i];
  return s;
}
}  // namespace

BandwidthResult MeasureBandwidth(const BandwidthOptions& opt, ThreadPool& pool) {
  BandwidthResult r;
  const int64_t n = opt.bytes / 4;
  std::unique_ptr<float[]> buf(new float[n]);
  // First touch by the threads that will read it.
  pool.ParallelFor(n, 4096, [&](size_t b, size_t e, int) { std::fill(buf.get() + b, buf.get() + e, 1.0f); });
  std::vector<float> sink(pool.num_threads() * 16);
  for (int rep = 0; rep < opt.repeats; ++rep) {
    double t0 = Seconds();
    pool.ParallelFor(n, 4096, [&](size_t b, size_t e, int t) { sink[t * 16] += SumRange(buf.get() + b, e - b); });
    double dt = Seconds() - t0;
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
    double t0 = Seconds();
    pool.ParallelFor(m, 4096, [&](size_t lo, size_t hi, int) {
      float* pa = a.get();
      const float* pb = b.get();
      const float* pc = c.get();
      for (size_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
    double dt = Seconds() - t0;
    r.triad_gbps = std::max(r.triad_gbps, 3.0 * m * 4 / dt / 1e9);
  }
  // Keep the compiler from dropping the reads.
  volatile float keep = sink[0] + a[m / 2];
  (void)keep;
  return r;
}

}  // namespace epserve::kernels
