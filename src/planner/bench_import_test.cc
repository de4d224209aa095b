#include "planner/bench_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "planner/layer_model.h"
#include "planner/step_model.h"
#include "planner/test_util.h"

namespace epserve::planner {
namespace {

// A fixed `epserve bench kernels --json` run of a made-up machine: 10 GB/s streaming read,
// OpenBLAS at 100 GFLOP/s. Its times follow known factors, so calibration must recover them:
//   matmul      overhead 15 us, memory 0.6, compute 0.5
//   grouped_mlp overhead  5 us, memory 0.7
//   attention   overhead  8 us, memory 0.5 (one row: only its time is recoverable)
//   silu        overhead  2 us, memory 0.4 (one row: only its time is recoverable)
constexpr double kReadGbps = 10, kBlasGflops = 100;

nlohmann::json Row(const char* kernel, const char* dtype, const char* regime, double bytes,
                   double flops, double seconds, double blas = 0) {
  return {{"kernel", kernel}, {"dtype", dtype},   {"shape", "fixed"},         {"regime", regime},
          {"bytes", bytes},   {"flops", flops},   {"seconds", seconds},       {"gbps", 0},
          {"gflops", 0},      {"blas_gflops", blas}, {"fraction_of_blas", 0}};
}

double MemorySeconds(double overhead_us, double bytes, double eff) {
  return overhead_us * 1e-6 + bytes / (eff * kReadGbps * 1e9);
}

double MatmulSeconds(double flops, double bytes) {
  return 15e-6 + std::max(flops / (0.5 * kBlasGflops * 1e9), bytes / (0.6 * kReadGbps * 1e9));
}

nlohmann::json FixedRun() {
  nlohmann::json rows = nlohmann::json::array();
  // Decode matmuls as the benchmark runs them: 1 and 2 rows over a 64 MiB and a 1 MiB FP8 weight
  // (time independent of the rows: memory-bound; two sizes: overhead and bandwidth separate).
  for (double mib : {64.0, 1.0}) {
    const double weight = mib * (1 << 20), k = std::sqrt(weight);
    for (double m : {1.0, 2.0}) {
      const double bytes = weight + 4.0 * m * 2 * k;
      rows.push_back(Row("matmul", "fp8", "memory", bytes, 2.0 * m * weight,
                         MatmulSeconds(2.0 * m * weight, bytes)));
    }
  }
  const double flops = 2.0 * 256 * 4096 * 4096, bytes = 4096.0 * 4096 + 4.0 * 256 * 2 * 4096;
  rows.push_back(Row("matmul", "fp8", "compute", bytes, flops, MatmulSeconds(flops, bytes),
                     kBlasGflops));
  for (double touched : {8.0, 161.0}) {
    const double b = touched * 3 * 1024 * 512 + 4.0 * 8 * 3072;
    rows.push_back(Row("grouped_mlp", "fp8", "memory", b, 2.0 * 8 * 3 * 1024 * 512,
                       MemorySeconds(5, b, 0.7)));
  }
  const double cache = 4.0 * 8 * 8192 * 576;
  rows.push_back(Row("mla_attention", "f32", "memory", cache, 2.0 * 8 * 16 * 8192 * 1088,
                     MemorySeconds(8, cache, 0.5)));
  rows.push_back(Row("silu_mul_quant_fp8", "f32", "memory", 75e6, 0, MemorySeconds(2, 75e6, 0.4)));
  rows.push_back(Row("rope_only", "f32", "memory", 1e6, 0, 1e-4));  // no planner family
  return {{"threads", 2},
          {"simd_target", "AVX2"},
          {"read_bandwidth_gbps", kReadGbps},
          {"triad_bandwidth_gbps", 8.0},
          {"rows", rows}};
}

TEST(BenchImportTest, MapsRowsAndMeasuredRoofs) {
  StatusOr<BenchImport> imported = ImportBenchKernels({FixedRun()}, {.memory_gb = 24});
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  std::map<std::string, int> count;
  for (const MeasuredKernel& s : imported->samples) count[s.kernel]++;
  EXPECT_EQ(count["gemm"], 5);
  EXPECT_EQ(count["bmm"], 4);  // the memory-bound matmul rows: the engine's BMM is its MatMul
  EXPECT_EQ(count["group_gemm"], 2);
  EXPECT_EQ(count["attention"], 1);
  EXPECT_EQ(count["elementwise"], 1);
  ASSERT_EQ(imported->skipped.size(), 1u);
  EXPECT_NE(imported->skipped[0].find("rope_only"), std::string::npos);
  const HardwareSpec& hw = imported->hardware;
  EXPECT_EQ(hw.name, "cpu");
  EXPECT_DOUBLE_EQ(hw.memory_bandwidth_tbs, kReadGbps / 1e3);
  EXPECT_DOUBLE_EQ(hw.fp8_tflops, kBlasGflops / 1e3);
  EXPECT_DOUBLE_EQ(hw.bf16_tflops, kBlasGflops / 1e3);
  EXPECT_DOUBLE_EQ(hw.nvlink_gbs, 8.0);
  EXPECT_EQ(hw.gpus_per_machine, 1);
  EXPECT_DOUBLE_EQ(hw.memory_gb, 24);
}

TEST(BenchImportTest, CsvRoundTripsToTheSameSamples) {
  StatusOr<BenchImport> imported = ImportBenchKernels({FixedRun()}, {.memory_gb = 24});
  ASSERT_TRUE(imported.ok());
  const std::string csv = MeasuredCsvText(imported->samples, "two\ncomment lines");
  EXPECT_EQ(csv.rfind("# two\n# comment lines\nkernel,shape,time_us\n", 0), 0u);
  StatusOr<std::vector<MeasuredKernel>> parsed = ParseMeasuredCsv(csv);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), imported->samples.size());
  for (size_t i = 0; i < parsed->size(); ++i) {
    EXPECT_EQ((*parsed)[i].kernel, imported->samples[i].kernel);
    EXPECT_EQ((*parsed)[i].fields, imported->samples[i].fields);
    EXPECT_NEAR((*parsed)[i].time_us, imported->samples[i].time_us,
                1e-8 * imported->samples[i].time_us);
  }
}

// Conversion + calibration end to end: the fit recovers the factors the times were made with.
TEST(BenchImportTest, CalibrationRecoversTheFactorsOfTheFixedRun) {
  StatusOr<BenchImport> imported = ImportBenchKernels({FixedRun()}, {.memory_gb = 24});
  ASSERT_TRUE(imported.ok());
  StatusOr<CalibrationResult> fit =
      Calibrate(imported->hardware, testing::Efficiency(), imported->samples);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  const EfficiencyFactors& f = fit->factors;
  EXPECT_NEAR(f.gemm.memory, 0.6, 0.6 * 0.02);
  EXPECT_NEAR(f.gemm.compute, 0.5, 0.5 * 0.02);
  EXPECT_NEAR(f.gemm.overhead_us, 15, 1.5);
  EXPECT_NEAR(f.bmm.memory, 0.6, 0.6 * 0.02);
  EXPECT_NEAR(f.group_gemm.memory, 0.7, 0.7 * 0.02);
  EXPECT_NEAR(f.group_gemm.overhead_us, 5, 1);
  // One attention and one elementwise row cannot split overhead from bandwidth: only their
  // times are checked (below), as for every row.
  for (const CalibrationRow& row : fit->rows) {
    EXPECT_NEAR(row.after_us / row.measured_us, 1.0, 0.02) << row.kernel << " " << row.shape;
  }
}

TEST(BenchImportTest, RejectsRunsWithoutRowsOrComputeRoof) {
  EXPECT_FALSE(ImportBenchKernels({}, {.memory_gb = 24}).ok());
  EXPECT_FALSE(ImportBenchKernels({nlohmann::json::object()}, {.memory_gb = 24}).ok());
  nlohmann::json memory_only = FixedRun();
  nlohmann::json rows = nlohmann::json::array();
  for (const nlohmann::json& r : memory_only["rows"]) {
    if (r["regime"] == "memory") rows.push_back(r);
  }
  memory_only["rows"] = rows;
  StatusOr<BenchImport> no_roof = ImportBenchKernels({memory_only}, {.memory_gb = 24});
  ASSERT_FALSE(no_roof.ok());
  EXPECT_NE(no_roof.status().message().find("compute roof"), std::string::npos);
  nlohmann::json bad = FixedRun();
  bad["rows"][0]["seconds"] = 0;
  StatusOr<BenchImport> bad_row = ImportBenchKernels({bad}, {.memory_gb = 24});
  ASSERT_FALSE(bad_row.ok());
  EXPECT_NE(bad_row.status().message().find("row 1"), std::string::npos);
  EXPECT_FALSE(ImportBenchKernels({FixedRun()}, {.memory_gb = 0}).ok());
}

// The CPU engine's benchmark runs one rank: the planner then prices no dispatch or combine, and
// an f32 cache doubles the attention's cache reads.
TEST(BenchImportTest, OneRankHasNoCommunicationAndF32CacheDoublesKvReads) {
  StatusOr<BenchImport> imported = ImportBenchKernels({FixedRun()}, {.memory_gb = 24});
  ASSERT_TRUE(imported.ok());
  const ModelSpec model = testing::Model("deepseek-v2-lite");
  const EfficiencyFactors eff = testing::Efficiency();
  StatusOr<RoutingModel> routing = RoutingModel::Uniform(model, 1, 1);
  ASSERT_TRUE(routing.ok()) << routing.status().ToString();
  StatusOr<Deployment> d = MakeDeployment(model, 1, 1, 1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const PlanContext ctx{.hw = &imported->hardware, .model = &model, .eff = &eff,
                        .routing = &*routing};
  Workload w{.batch = 8, .kv_len = 4096, .query_len = 1, .acceptance_rate = 0};
  StatusOr<LayerBreakdown> bf16 = ModelMoeLayer(ctx, *d, w, OverlapMode::kDispatchOverlap);
  w.kv_element_bytes = 4;
  StatusOr<LayerBreakdown> f32 = ModelMoeLayer(ctx, *d, w, OverlapMode::kDispatchOverlap);
  ASSERT_TRUE(bf16.ok() && f32.ok());
  EXPECT_EQ(bf16->dispatch.transfer_us, 0);
  EXPECT_EQ(bf16->combine.transfer_us, 0);
  EXPECT_NEAR(bf16->touched_experts, 64 * (1 - std::pow(1 - 6.0 / 64, 8)), 0.5);
  const double cache = 8.0 * 4096 * (512 + 64) * 2;
  double bf16_bytes = 0, f32_bytes = 0;
  for (const KernelTime& k : bf16->kernels) bf16_bytes += k.name == "attention" ? k.cost.bytes : 0;
  for (const KernelTime& k : f32->kernels) f32_bytes += k.name == "attention" ? k.cost.bytes : 0;
  EXPECT_NEAR(f32_bytes - bf16_bytes, cache, 1);
  EXPECT_DOUBLE_EQ(EstimateMemory(ctx, *d, w).kv_bytes_per_request,
                   2 * model.KvBytesPerToken() * w.kv_len);
}

}  // namespace
}  // namespace epserve::planner
