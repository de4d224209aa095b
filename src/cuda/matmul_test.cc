// The device matmuls (cuda/matmul.cu) against their CPU twins kernels::MatMulReference and
// kernels::MatMulTReference on random F32, BF16 and FP8 weights: tiny and DeepSeek-V3 shapes,
// batches of problems with different row counts, FP8 row slices off the 128-row tiles, padded
// strides, accumulation, column groups with a partial last one, results bit-identical whatever
// the batch, the argument checks; and CudaMatMulPerf.DecodeShapes, timings at decode shapes.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/ops.h"
#include "cuda/test_util.h"

namespace epserve::cuda {
namespace {

using testing::MakeTestWeight;
using testing::MaxRelativeError;
using testing::RandomFloats;
using testing::TestWeight;
using testing::ToDevice;
using testing::ToHost;

// Per element: |gpu - ref| <= kTol * sum_k |x_k * w_k| + kAbs. The GPU accumulates in f32 in
// another order than the double-accumulating twin (32 lane sums of K/32 terms and a shuffle
// tree, or n sequential terms for MatMulT): about sqrt(K) * 2^-24 of the magnitude typically,
// at worst (K/32 + 5) * 2^-24 for MatMul's lanes (1.4e-5 at K = 7168) and n * 2^-24 for
// MatMulT's (n <= 300 here: 1.8e-5). kTol = 2e-5 holds the worst case; a wrong index or scale
// errs by O(1). kAbs covers outputs whose terms are all ~0 (and padding left untouched).
constexpr double kTol = 2e-5;
constexpr double kAbs = 1e-7;

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF8E4M3};

// W [rows, cols] dequantized on the host.
std::vector<float> Dequantized(const WeightView& w) {
  std::vector<float> out(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) kernels::DequantizeRow(w, r, 0, w.cols, &out[r * w.cols]);
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 std::vector<double> magnitude, const std::string& what) {
  for (double& m : magnitude) m += kAbs / kTol;
  EXPECT_LE(MaxRelativeError(got, want, magnitude), kTol) << what;
}

// A weight of one problem: views over the same values on the host and on the device.
struct Weights {
  WeightView host, device;
};

struct Spec {
  int64_t rows = 0;
  int64_t x_pad = 0, y_pad = 0;  // extra floats per row of x and y (0: strides given as 0)
};

// Runs `specs` (problem i with weight w[i]) in one MatMul call and checks every y buffer,
// padding included, against the twin.
void RunAndCheck(const std::vector<Weights>& w, const std::vector<Spec>& specs, bool accumulate,
                 uint64_t seed, const std::string& what) {
  const int64_t N = w[0].host.rows, K = w[0].host.cols;
  const size_t P = specs.size();
  std::vector<std::vector<float>> x(P), y0(P), want(P);
  std::vector<std::vector<double>> magnitude(P);
  std::vector<DeviceBuffer> dx(P), dy(P);
  std::vector<MatMulProblem> problems(P);
  for (size_t i = 0; i < P; ++i) {
    const Spec& s = specs[i];
    const int64_t xs = K + s.x_pad, ys = N + s.y_pad;
    x[i] = RandomFloats(std::max<int64_t>(s.rows * xs, 1), seed + 2 * i);
    y0[i] = RandomFloats(std::max<int64_t>(s.rows * ys, 1), seed + 2 * i + 1);
    want[i] = y0[i];
    kernels::MatMulReference({.x = x[i].data(),
                              .x_stride = xs,
                              .num_rows = s.rows,
                              .w = w[i].host,
                              .y = want[i].data(),
                              .y_stride = ys,
                              .accumulate = accumulate});
    const std::vector<float> wd = Dequantized(w[i].host);
    magnitude[i].assign(want[i].size(), 0.0);
    for (int64_t m = 0; m < s.rows; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = accumulate ? std::fabs(y0[i][m * ys + n]) : 0.0;
        for (int64_t k = 0; k < K; ++k)
          sum += std::fabs(static_cast<double>(x[i][m * xs + k]) * wd[n * K + k]);
        magnitude[i][m * ys + n] = sum;
      }
    dx[i] = ToDevice(x[i]);
    dy[i] = ToDevice(y0[i]);
    problems[i] = {.x = dx[i].as<float>(),
                   .x_stride = s.x_pad ? xs : 0,
                   .num_rows = s.rows,
                   .w = w[i].device,
                   .y = dy[i].as<float>(),
                   .y_stride = s.y_pad ? ys : 0};
  }
  DeviceBuffer scratch;
  ASSERT_TRUE(
      MatMul(problems.data(), static_cast<int>(P), {.accumulate = accumulate}, scratch, nullptr)
          .ok())
      << what;
  for (size_t i = 0; i < P; ++i)
    ExpectClose(ToHost<float>(dy[i], y0[i].size()), want[i], magnitude[i],
                what + ", problem " + std::to_string(i) + " rows " + std::to_string(specs[i].rows));
}

std::string Name(DType dtype, int64_t n, int64_t k) {
  return std::string(DTypeName(dtype)) + " [" + std::to_string(n) + ", " + std::to_string(k) + "]";
}

TEST(CudaMatMulTest, TinyAndUnalignedShapes) {
  EPSERVE_REQUIRE_GPU();
  // K = 5 and 1003: scalar loads; K = 1000: 16-byte rows for F32 and BF16, not for FP8.
  const int64_t shapes[][2] = {{3, 5}, {37, 1000}, {37, 1003}, {1, 128}};
  for (DType dtype : kDTypes)
    for (const auto& nk : shapes) {
      TestWeight tw;
      MakeTestWeight(dtype, nk[0], nk[1], 7 * nk[0] + nk[1], &tw);
      for (int64_t m : {1, 3, 9})
        RunAndCheck({{tw.host, tw.device}}, {{.rows = m}}, false, m,
                    Name(dtype, nk[0], nk[1]) + " M " + std::to_string(m));
    }
}

TEST(CudaMatMulTest, DeepSeekV3ExpertShapes) {
  EPSERVE_REQUIRE_GPU();
  const int64_t shapes[][2] = {{2048, 7168}, {7168, 2048}};  // expert gate/up, down
  for (DType dtype : kDTypes)
    for (const auto& nk : shapes) {
      TestWeight tw;
      MakeTestWeight(dtype, nk[0], nk[1], nk[0] + 3, &tw);
      for (int64_t m : {1, 8, 33})
        RunAndCheck({{tw.host, tw.device}}, {{.rows = m}}, false, 100 + m,
                    Name(dtype, nk[0], nk[1]) + " M " + std::to_string(m));
    }
}

TEST(CudaMatMulTest, RowSliceOffTheScaleTiles) {
  EPSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    TestWeight tw;
    MakeTestWeight(dtype, 1024, 7168, 11, &tw);
    // Rows 77 .. 777: FP8 rows straddle the 128-row scale tiles (scale_row_offset 77).
    const Weights slice{tw.host.RowSlice(77, 700), tw.device.RowSlice(77, 700)};
    if (dtype == DType::kF8E4M3) {
      EXPECT_EQ(slice.device.scale_row_offset, 77);
    }
    for (int64_t m : {1, 8, 33})
      RunAndCheck({slice}, {{.rows = m}}, false, 200 + m,
                  std::string(DTypeName(dtype)) + " slice M " + std::to_string(m));
  }
}

TEST(CudaMatMulTest, BatchedProblemsStridesAndAccumulate) {
  EPSERVE_REQUIRE_GPU();
  const std::vector<int64_t> rows = {3, 0, 17, 1, 8, 0, 40};
  for (DType dtype : kDTypes) {
    std::vector<TestWeight> tw(rows.size());
    std::vector<Weights> w;
    for (size_t i = 0; i < rows.size(); ++i) {
      MakeTestWeight(dtype, 300, 1024, 50 + i, &tw[i]);
      w.push_back({tw[i].host, tw[i].device});
    }
    // Strides that keep rows of x 16-byte aligned, and ones that do not (scalar x loads).
    for (int64_t x_pad : {0, 4, 5})
      for (bool accumulate : {false, true}) {
        std::vector<Spec> specs;
        for (size_t i = 0; i < rows.size(); ++i)
          specs.push_back({.rows = rows[i], .x_pad = i % 2 ? x_pad : 0, .y_pad = i % 3 ? 3 : 0});
        RunAndCheck(w, specs, accumulate, 300 + x_pad,
                    std::string(DTypeName(dtype)) + " batch x_pad " + std::to_string(x_pad) +
                        (accumulate ? " accumulate" : ""));
      }
  }
}

TEST(CudaMatMulTest, ColumnGroupsWithAPartialLast) {
  EPSERVE_REQUIRE_GPU();
  // N = 1001 (not a multiple of 32): the last group of 8 warps x C columns is partial; its
  // warps past N load row N - 1 and store nothing. On 132 SMs, 1 / 40 / 70 rows (1 / 5 / 9
  // items) take C = 1 / 2 / 4 columns per warp (the most that still give >= 2 blocks per SM);
  // another GPU takes some other C, which the results do not depend on.
  for (DType dtype : kDTypes) {
    TestWeight tw;
    MakeTestWeight(dtype, 1100, 1024, 400, &tw);
    // Rows 77 .. 1077: FP8 column groups straddle the 128-row scale tiles.
    const Weights w{tw.host.RowSlice(77, 1001), tw.device.RowSlice(77, 1001)};
    for (int64_t m : {1, 40, 70})
      for (int64_t x_pad : {0, 5})  // x rows 16-byte aligned or not
        RunAndCheck({w}, {{.rows = m, .x_pad = x_pad, .y_pad = 3}}, x_pad != 0, 500 + m,
                    Name(dtype, 1001, 1024) + " M " + std::to_string(m) + " x_pad " +
                        std::to_string(x_pad));
  }
}

TEST(CudaMatMulTest, RowResultsDoNotDependOnTheBatch) {
  EPSERVE_REQUIRE_GPU();
  // The same row alone (one item, C = 1 on 132 SMs) and among 70 rows (9 items, C = 4), as one
  // problem and batched with another: bit for bit the same output.
  constexpr int64_t N = 1001, K = 1024, M = 70;
  for (DType dtype : kDTypes) {
    TestWeight tw;
    MakeTestWeight(dtype, N, K, 600, &tw);
    DeviceBuffer dx = ToDevice(RandomFloats(M * K, 601)), all(ToDevice(std::vector<float>(M * N)));
    DeviceBuffer scratch;
    const MatMulProblem p{.x = dx.as<float>(), .num_rows = M, .w = tw.device, .y = all.as<float>()};
    ASSERT_TRUE(MatMul(&p, 1, {}, scratch, nullptr).ok());
    const std::vector<float> want = ToHost<float>(all, M * N);
    for (int64_t r : {0, 33, 69}) {
      DeviceBuffer one = ToDevice(std::vector<float>(N)), two = ToDevice(std::vector<float>(N));
      const MatMulProblem single{
          .x = dx.as<float>() + r * K, .num_rows = 1, .w = tw.device, .y = one.as<float>()};
      ASSERT_TRUE(MatMul(&single, 1, {}, scratch, nullptr).ok());
      const MatMulProblem pair[2] = {
          p, {.x = dx.as<float>() + r * K, .num_rows = 1, .w = tw.device, .y = two.as<float>()}};
      ASSERT_TRUE(MatMul(pair, 2, {}, scratch, nullptr).ok());
      const std::vector<float> got_one = ToHost<float>(one, N), got_two = ToHost<float>(two, N);
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(got_one[n], want[r * N + n]) << Name(dtype, N, K) << " row " << r << " n " << n;
        ASSERT_EQ(got_two[n], want[r * N + n]) << Name(dtype, N, K) << " row " << r << " n " << n;
      }
    }
  }
}

TEST(CudaMatMulTest, NothingToDo) {
  EPSERVE_REQUIRE_GPU();
  TestWeight tw;
  MakeTestWeight(DType::kBF16, 16, 32, 1, &tw);
  std::vector<float> y0 = RandomFloats(16, 2);
  DeviceBuffer dx = ToDevice(RandomFloats(32, 3)), dy = ToDevice(y0), scratch;
  const MatMulProblem p{.x = dx.as<float>(), .num_rows = 0, .w = tw.device, .y = dy.as<float>()};
  EXPECT_TRUE(MatMul(&p, 1, {}, scratch, nullptr).ok());
  EXPECT_TRUE(MatMul(&p, 0, {}, scratch, nullptr).ok());
  EXPECT_EQ(ToHost<float>(dy, 16), y0);
}

TEST(CudaMatMulTest, RejectsBadArguments) {
  // Checked on the host before anything reaches the device: runs without a GPU.
  DeviceBuffer scratch;
  float dummy[4] = {};
  // Int8-requantized and FP4 weights have no kernel; the storage types are no weight's.
  for (DType dtype :
       {DType::kI8Packed, DType::kF4E2M1, DType::kF8E8M0, DType::kI8, DType::kI32, DType::kI64}) {
    const WeightView w{.dtype = dtype,
                       .rows = 16,
                       .cols = 128,
                       .data = dummy,
                       .scale = dummy,
                       .scale_ue8m0 = reinterpret_cast<const uint8_t*>(dummy)};
    MatMulProblem p{.x = dummy, .num_rows = 1, .w = w, .y = dummy};
    const Status st = MatMul(&p, 1, {}, scratch, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << DTypeName(dtype);
    EXPECT_NE(st.message().find(DTypeName(dtype)), std::string::npos) << st.message();
    EXPECT_EQ(
        MatMulT({.x = dummy, .num_tokens = 1, .num_heads = 1, .w = w, .n = 16, .y = dummy}, nullptr)
            .code(),
        StatusCode::kInvalidArgument)
        << DTypeName(dtype);
    DeviceBuffer storage;
    ExpertWeightTable table;
    EXPECT_EQ(MakeExpertWeightTable(&w, 1, storage, &table).code(), StatusCode::kInvalidArgument)
        << DTypeName(dtype);
  }

  // Problems that disagree on the weight's shape.
  const WeightView a{.dtype = DType::kF32, .rows = 4, .cols = 8, .data = dummy};
  WeightView b = a;
  b.cols = 12;
  const MatMulProblem two[2] = {{.x = dummy, .num_rows = 1, .w = a, .y = dummy},
                                {.x = dummy, .num_rows = 1, .w = b, .y = dummy}};
  EXPECT_EQ(MatMul(two, 2, {}, scratch, nullptr).code(), StatusCode::kInvalidArgument);
  // Heads beyond the weight's rows.
  EXPECT_EQ(MatMulT({.x = dummy,
                     .num_tokens = 1,
                     .num_heads = 2,
                     .w = a,
                     .w_head_row_stride = 3,
                     .n = 2,
                     .y = dummy},
                    nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

// MatMulT over `heads` heads of n rows at w_head_row_stride in rows [row_begin, ...) of a
// random weight, T tokens, padded strides; checks all of y against MatMulTReference per head.
void CheckMatMulT(DType dtype, int heads, int64_t n, int64_t K, int64_t head_stride,
                  int64_t row_begin, int64_t T) {
  const std::string what = std::string(DTypeName(dtype)) + " heads " + std::to_string(heads) +
                           " n " + std::to_string(n) + " K " + std::to_string(K) + " stride " +
                           std::to_string(head_stride) + " from row " + std::to_string(row_begin) +
                           " T " + std::to_string(T);
  const int64_t rows = (heads - 1) * head_stride + n;
  TestWeight tw;
  MakeTestWeight(dtype, row_begin + rows + 5, K, 17 + n + K, &tw);
  const WeightView host = tw.host.RowSlice(row_begin, rows);
  const WeightView device = tw.device.RowSlice(row_begin, rows);
  const int64_t xhs = n + 3, xts = heads * xhs + 1, yhs = K + 2, yts = heads * yhs + 5;
  const std::vector<float> x = RandomFloats(T * xts, T + n);
  const std::vector<float> y0 = RandomFloats(T * yts, T + K);
  std::vector<float> want = y0;
  std::vector<double> magnitude(want.size(), 0.0);
  const std::vector<float> wd = Dequantized(host);
  for (int h = 0; h < heads; ++h) {
    kernels::MatMulTReference({.x = x.data() + h * xhs,
                               .x_stride = xts,
                               .num_rows = T,
                               .w = host.RowSlice(h * head_stride, n),
                               .y = want.data() + h * yhs,
                               .y_stride = yts});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < n; ++j) {
        const double xv = std::fabs(x[t * xts + h * xhs + j]);
        const float* wrow = &wd[(h * head_stride + j) * K];
        double* mag = &magnitude[t * yts + h * yhs];
        for (int64_t k = 0; k < K; ++k) mag[k] += xv * std::fabs(wrow[k]);
      }
  }
  DeviceBuffer dx = ToDevice(x), dy = ToDevice(y0);
  ASSERT_TRUE(MatMulT({.x = dx.as<float>(),
                       .x_token_stride = xts,
                       .x_head_stride = xhs,
                       .num_tokens = T,
                       .num_heads = heads,
                       .w = device,
                       .w_head_row_stride = head_stride,
                       .n = n,
                       .y = dy.as<float>(),
                       .y_token_stride = yts,
                       .y_head_stride = yhs},
                      nullptr)
                  .ok())
      << what;
  ExpectClose(ToHost<float>(dy, y0.size()), want, magnitude, what);
}

TEST(CudaMatMulTTest, DeepSeekV3AbsorbedQuery) {
  EPSERVE_REQUIRE_GPU();
  // kv_b_proj-like [heads * (128 + 128), 512]: head h's W_uk is rows h * 256 .. + 128.
  for (DType dtype : kDTypes)
    for (int64_t T : {1, 7, 33}) CheckMatMulT(dtype, 16, 128, 512, 256, 0, T);
}

TEST(CudaMatMulTTest, HeadsOffTheScaleTilesAndChunks) {
  EPSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    // Heads every 192 rows of a slice from row 64: FP8 heads straddle the scale tiles.
    CheckMatMulT(dtype, 16, 128, 512, 192, 64, 9);
    // n over one shared-memory chunk, K not a multiple of 128, more tokens than one tile.
    CheckMatMulT(dtype, 3, 300, 700, 310, 5, 19);
  }
}

// Decode-shaped MatMuls timed on the device (weights of DeepSeek-V3 and V2-Lite layers), beside
// the device's copy bandwidth: one line per case. Checks results against the twin on one shape
// and asserts no speed (the goals live in docs/benchmarks.md). Each case: the median of 20
// event-timed calls (a single problem: no descriptor upload, but the host's work and the launch
// count), and the kernel alone (20 calls in a CUDA graph, replayed: total / 20).
TEST(CudaMatMulPerf, DecodeShapes) {
  EPSERVE_REQUIRE_GPU();
  // Correct on one of the timed shapes (v2-lite expert), at the rows that take C = 1 and 4.
  for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
    TestWeight tw;
    MakeTestWeight(dtype, 1408, 2048, 700, &tw);
    for (int64_t m : {1, 128})
      RunAndCheck({{tw.host, tw.device}}, {{.rows = m}}, false, 700 + m,
                  Name(dtype, 1408, 2048) + " M " + std::to_string(m));
  }

  cudaEvent_t start, stop;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Runs `op` 2 times to warm up, then 20 times between events: the median in seconds.
  const auto median_seconds = [&](const auto& op) {
    for (int i = 0; i < 2; ++i) op();
    std::vector<float> ms(20);
    for (float& t : ms) {
      EXPECT_EQ(cudaEventRecord(start, nullptr), cudaSuccess);
      op();
      EXPECT_EQ(cudaEventRecord(stop, nullptr), cudaSuccess);
      EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      EXPECT_EQ(cudaEventElapsedTime(&t, start, stop), cudaSuccess);
    }
    std::sort(ms.begin(), ms.end());
    return (ms[9] + ms[10]) / 2 * 1e-3;
  };

  // Device-to-device copy of 1 GiB: bytes read + written per second.
  constexpr int64_t kCopyBytes = int64_t{1} << 30;
  double copy_gbs = 0;
  {
    DeviceBuffer a, b;
    ASSERT_TRUE(a.Allocate(kCopyBytes, "copy source").ok());
    ASSERT_TRUE(b.Allocate(kCopyBytes, "copy target").ok());
    ASSERT_EQ(cudaMemset(a.data(), 1, kCopyBytes), cudaSuccess);
    const double t = median_seconds([&] {
      EXPECT_EQ(cudaMemcpyAsync(b.data(), a.data(), kCopyBytes, cudaMemcpyDeviceToDevice, nullptr),
                cudaSuccess);
    });
    copy_gbs = 2.0 * kCopyBytes / t * 1e-9;
  }
  std::printf("[ copy     ] device-to-device 1 GiB: %.0f GB/s (read + written)\n", copy_gbs);

  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {{7168, 2048, "v3 expert down / attention out"},
                          {2048, 7168, "v3 expert gate, up"},
                          {1408, 2048, "v2-lite expert"},
                          {102400, 2048, "v2-lite LM head"}};
  constexpr int64_t kMaxRows = 128;
  int64_t max_w = 0, max_x = 0, max_y = 0, max_scales = 0;
  for (const Shape& sh : shapes) {
    max_w = std::max(max_w, sh.n * sh.k * 2);
    max_x = std::max(max_x, kMaxRows * sh.k);
    max_y = std::max(max_y, kMaxRows * sh.n);
    max_scales = std::max(max_scales, (sh.n + 127) / 128 * ((sh.k + 127) / 128));
  }
  // Weights, scales and x all bytes 0x3C: bf16 0.0115, fp8 1.5, f32 0.0115.
  DeviceBuffer w, scales, x, y, scratch;
  ASSERT_TRUE(w.Allocate(max_w, "weights").ok());
  ASSERT_TRUE(scales.Allocate(max_scales * 4, "scales").ok());
  ASSERT_TRUE(x.Allocate(max_x * 4, "x").ok());
  ASSERT_TRUE(y.Allocate(max_y * 4, "y").ok());
  ASSERT_EQ(cudaMemset(w.data(), 0x3C, max_w), cudaSuccess);
  ASSERT_EQ(cudaMemset(scales.data(), 0x3C, max_scales * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(x.data(), 0x3C, max_x * 4), cudaSuccess);
  for (DType dtype : {DType::kBF16, DType::kF8E4M3})
    for (const Shape& sh : shapes)
      for (int64_t m : {1, 8, 32, 128}) {
        const WeightView view{.dtype = dtype,
                              .rows = sh.n,
                              .cols = sh.k,
                              .data = w.data(),
                              .scale = dtype == DType::kF8E4M3 ? scales.as<float>() : nullptr};
        const MatMulProblem p{.x = x.as<float>(), .num_rows = m, .w = view, .y = y.as<float>()};
        // A call as the engine makes it today (host work and launch included), and the kernel
        // alone: 20 calls captured in a CUDA graph, replayed back to back.
        const double t_call =
            median_seconds([&] { EXPECT_TRUE(MatMul(&p, 1, {}, scratch, nullptr).ok()); });
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        for (int i = 0; i < 20; ++i) EXPECT_TRUE(MatMul(&p, 1, {}, scratch, stream).ok());
        ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        const double t_kernel =
            median_seconds([&] { EXPECT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess); }) / 20;
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        const double bytes = static_cast<double>(view.DataBytes() + view.ScaleBytes());
        std::printf(
            "[ matmul   ] %-7s N %6lld K %5lld M %3lld  call %7.1f us %5.0f GB/s  kernel "
            "%7.1f us %5.0f GB/s (%4.1f%% of copy)  %s\n",
            DTypeName(dtype), static_cast<long long>(sh.n), static_cast<long long>(sh.k),
            static_cast<long long>(m), t_call * 1e6, bytes / t_call * 1e-9, t_kernel * 1e6,
            bytes / t_kernel * 1e-9, 100 * bytes / t_kernel * 1e-9 / copy_gbs, sh.what);
      }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(stream);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace
}  // namespace epserve::cuda
