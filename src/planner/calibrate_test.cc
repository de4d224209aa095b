#include "planner/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;

// Builds a CSV of kernel times the roofline model gives under `truth`, with deterministic
// +-2% noise, spanning memory- and compute-bound shapes.
std::string SyntheticCsv(const HardwareSpec& hw, const EfficiencyFactors& truth) {
  std::vector<std::pair<std::string, std::string>> shapes;
  for (int m : {1, 4, 16, 64, 256, 1024, 4096}) {
    shapes.push_back({"gemm", "m=" + std::to_string(m) + ";k=7168;n=2112"});
    shapes.push_back({"gemm", "m=" + std::to_string(m) + ";k=16384;n=7168"});
    shapes.push_back({"group_gemm", "g=8;m=" + std::to_string(m) + ";k=7168;n=4096"});
  }
  for (int b : {1, 16, 128}) {
    shapes.push_back({"attention", "b=" + std::to_string(b) + ";q=1;l=5000;h=16"});
    shapes.push_back({"attention", "b=" + std::to_string(b) + ";q=2;l=5000;h=128"});
  }
  for (double mb : {0.1, 1.0, 5.0, 20.0}) {
    const std::string bytes = std::to_string(static_cast<long long>(mb * 1e6));
    shapes.push_back({"dispatch", "bytes=" + bytes + ";fabric=ib"});
    shapes.push_back({"dispatch", "bytes=" + bytes + " fabric=nvlink"});
    shapes.push_back({"elementwise", "bytes=" + bytes});
  }
  std::ostringstream csv;
  csv << "kernel,shape,time_us\n";
  int i = 0;
  for (const auto& [kernel, shape] : shapes) {
    MeasuredKernel sample{.kernel = kernel, .shape = shape};
    std::string token;
    for (char c : shape + ";") {
      if (c == ';' || c == ' ') {
        size_t eq = token.find('=');
        if (eq != std::string::npos) sample.fields[token.substr(0, eq)] = token.substr(eq + 1);
        token.clear();
      } else {
        token += c;
      }
    }
    StatusOr<double> t = ModelKernelUs(hw, truth, sample);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    const double noise = 1 + 0.02 * std::sin(1.7 * ++i);
    csv << kernel << ",\"" << shape << "\"," << *t * noise << "\n";
  }
  return csv.str();
}

TEST(CalibrateTest, RecoversKnownFactorsFromSyntheticMeasurements) {
  HardwareSpec h100 = Gpu("H100");
  EfficiencyFactors prior = Efficiency();
  EfficiencyFactors truth = prior;
  truth.gemm = {.compute = 0.55, .memory = 0.6, .overhead_us = 7};
  truth.group_gemm = {.compute = 0.5, .memory = 0.7, .overhead_us = 4};
  truth.attention = {.compute = 0.5, .memory = 0.6, .overhead_us = 5};
  truth.dispatch = {.nvlink = 0.3, .infiniband = 0.4, .overhead_us = 15};
  truth.elementwise = {.compute = 1, .memory = 0.5, .overhead_us = 2};
  StatusOr<std::vector<MeasuredKernel>> samples = ParseMeasuredCsv(SyntheticCsv(h100, truth));
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  StatusOr<CalibrationResult> fit = Calibrate(h100, prior, *samples);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  const EfficiencyFactors& f = fit->factors;
  EXPECT_NEAR(f.gemm.compute, 0.55, 0.55 * 0.06);
  EXPECT_NEAR(f.gemm.memory, 0.6, 0.6 * 0.06);
  EXPECT_NEAR(f.gemm.overhead_us, 7, 1.0);
  EXPECT_NEAR(f.group_gemm.compute, 0.5, 0.5 * 0.06);
  EXPECT_NEAR(f.group_gemm.memory, 0.7, 0.7 * 0.06);
  EXPECT_NEAR(f.attention.compute, 0.5, 0.5 * 0.06);
  EXPECT_NEAR(f.dispatch.infiniband, 0.4, 0.4 * 0.06);
  EXPECT_NEAR(f.dispatch.nvlink, 0.3, 0.3 * 0.06);
  EXPECT_NEAR(f.dispatch.overhead_us, 15, 1.5);
  EXPECT_NEAR(f.elementwise.memory, 0.5, 0.5 * 0.06);
  for (const FamilyFit& family : fit->families) {
    EXPECT_LT(family.rms_log_error_after, 0.03) << family.family;
    EXPECT_LE(family.rms_log_error_after, family.rms_log_error_before) << family.family;
  }
  // Families absent from the CSV keep their prior values.
  EXPECT_EQ(f.combine.infiniband, prior.combine.infiniband);
  EXPECT_EQ(f.bmm.memory, prior.bmm.memory);
  EXPECT_TRUE(f.Validate().ok());
  EXPECT_TRUE(EfficiencyFromJson(CalibrationToJson(*fit)["efficiency"]).ok());
}

TEST(CalibrateTest, UnconstrainedFactorsKeepTheirPrior) {
  HardwareSpec h100 = Gpu("H100");
  EfficiencyFactors prior = Efficiency();
  // Only m = 1 GEMMs: memory-bound, so they say nothing about compute efficiency.
  std::string csv =
      "kernel,shape,time_us\n"
      "gemm,m=1;k=7168;n=2112,12\n"
      "gemm,m=1;k=16384;n=7168,60\n"
      "gemm,m=1;k=7168;n=36864,110\n";
  StatusOr<std::vector<MeasuredKernel>> samples = ParseMeasuredCsv(csv);
  ASSERT_TRUE(samples.ok());
  StatusOr<CalibrationResult> fit = Calibrate(h100, prior, *samples);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->factors.gemm.compute, prior.gemm.compute);
  ASSERT_EQ(fit->families.size(), 1u);
  EXPECT_NE(std::find(fit->families[0].kept.begin(), fit->families[0].kept.end(), "compute"),
            fit->families[0].kept.end());
}

TEST(CalibrateTest, ShapesMayBeGivenAsFlopsAndBytes) {
  HardwareSpec h100 = Gpu("H100");
  EfficiencyFactors eff = Efficiency();
  StatusOr<std::vector<MeasuredKernel>> samples = ParseMeasuredCsv(
      "gemm,m=256;k=7168;n=2112,20\n"
      "gemm,flops=7751073792;bytes=17514496,20\n");  // the same GEMM as totals
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  StatusOr<double> by_shape = ModelKernelUs(h100, eff, (*samples)[0]);
  StatusOr<double> by_totals = ModelKernelUs(h100, eff, (*samples)[1]);
  ASSERT_TRUE(by_shape.ok() && by_totals.ok());
  EXPECT_NEAR(*by_shape, *by_totals, 1e-9);
}

TEST(CalibrateTest, BadCsvIsAClearError) {
  EXPECT_FALSE(ParseMeasuredCsv("").ok());
  EXPECT_FALSE(ParseMeasuredCsv("gemm,m=1;k=2\n").ok());         // two fields
  EXPECT_FALSE(ParseMeasuredCsv("gemm,m=1;k=2;n=3,-4\n").ok());  // negative time
  EXPECT_FALSE(ParseMeasuredCsv("gemm,m1;k=2;n=3,4\n").ok());    // not key=value
  HardwareSpec h100 = Gpu("H100");
  StatusOr<std::vector<MeasuredKernel>> unknown = ParseMeasuredCsv("conv,m=1,4\n");
  ASSERT_TRUE(unknown.ok());
  StatusOr<CalibrationResult> fit = Calibrate(h100, Efficiency(), *unknown);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("unknown kernel"), std::string::npos);
  StatusOr<std::vector<MeasuredKernel>> missing = ParseMeasuredCsv("gemm,m=1;k=2,4\n");
  ASSERT_TRUE(missing.ok());
  fit = Calibrate(h100, Efficiency(), *missing);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("missing 'n'"), std::string::npos);
}

}  // namespace
}  // namespace epserve::planner
