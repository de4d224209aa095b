#include "planner/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/report_json.h"
#include "planner/test_util.h"

namespace epserve::planner {
namespace {

using testing::Efficiency;
using testing::Gpu;
using testing::Model;

// The write-up's sweep: EP8 on one H200 machine, EP16-EP128 on H100 machines, TP 1-8,
// 1-128 requests per GPU, KV 5000, query length 2 at 60% acceptance.
class PublishedSweepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    h100_ = new HardwareSpec(Gpu("H100"));
    h200_ = new HardwareSpec(Gpu("H200"));
    model_ = new ModelSpec(Model("deepseek-v3"));
    eff_ = new EfficiencyFactors(Efficiency());
    SweepOptions options;
    options.workload = {.batch = 1, .kv_len = 5000, .query_len = 2, .acceptance_rate = 0.6};
    StatusOr<SweepResult> result =
        RunSweep({.hw = h100_, .single_machine_hw = h200_, .model = model_, .eff = eff_}, options);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    result_ = new SweepResult(*std::move(result));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete eff_;
    delete model_;
    delete h200_;
    delete h100_;
  }
  static HardwareSpec* h100_;
  static HardwareSpec* h200_;
  static ModelSpec* model_;
  static EfficiencyFactors* eff_;
  static SweepResult* result_;
};
HardwareSpec* PublishedSweepTest::h100_ = nullptr;
HardwareSpec* PublishedSweepTest::h200_ = nullptr;
ModelSpec* PublishedSweepTest::model_ = nullptr;
EfficiencyFactors* PublishedSweepTest::eff_ = nullptr;
SweepResult* PublishedSweepTest::result_ = nullptr;

// "At 40-80 tokens/s per request, EP128 gives ~5x the throughput per machine of single-node EP8."
// The model reproduces 4-6x from 50 to 80 tokens/s at every speed, and over 40-80 on average; at
// 40-45 tokens/s it gives only 2.6-3.8x (single-machine EP8 amortizes its expert reads over a
// growing batch sooner than the write-up's figure shows). docs/planner.md records the gap.
TEST_F(PublishedSweepTest, Ep128GivesAboutFiveTimesSingleMachineThroughputAt40To80) {
  const std::vector<SweepPoint> ep8 = ParetoFrontier(PointsWithEp(*result_, 8));
  const std::vector<SweepPoint> ep128 = ParetoFrontier(PointsWithEp(*result_, 128));
  double log_sum = 0;
  int count = 0;
  for (double speed = 40; speed <= 80; speed += 5) {
    const double a = ThroughputAtSpeed(ep128, speed);
    const double b = ThroughputAtSpeed(ep8, speed);
    ASSERT_GT(b, 0) << "no single-machine point reaches " << speed << " tokens/s";
    const double ratio = a / b;
    std::printf("at >= %.0f tok/s: EP128 %6.0f, EP8 %6.0f tokens/s/machine, ratio %.2f\n", speed, a,
                b, ratio);
    log_sum += std::log(ratio);
    ++count;
    EXPECT_GT(ratio, 2.0) << "EP128 must stay well ahead at " << speed << " tokens/s";
    if (speed >= 50) {
      EXPECT_GE(ratio, 4.0) << "at " << speed << " tokens/s";
      EXPECT_LE(ratio, 6.0) << "at " << speed << " tokens/s";
    }
  }
  const double mean = std::exp(log_sum / count);
  std::printf("geometric mean over 40-80 tokens/s: %.2f\n", mean);
  EXPECT_GE(mean, 4.0);
  EXPECT_LE(mean, 6.0);
}

// "At >= 64 requests per GPU single-node throughput is slightly above multi-node."
TEST_F(PublishedSweepTest, AtLargeBatchSingleMachineThroughputIsSlightlyAhead) {
  auto find = [&](int ep, int batch) {
    for (const SweepPoint& p : PointsWithEp(*result_, ep)) {
      if (p.deployment.tp == 1 && p.batch == batch) return p.estimate.throughput_per_machine;
    }
    return 0.0;
  };
  const double ep8 = find(8, 64);
  const double ep128 = find(128, 64);
  std::printf("64 requests/GPU, TP1: EP8 %.0f, EP128 %.0f tokens/s/machine\n", ep8, ep128);
  EXPECT_GT(ep8, ep128);
  EXPECT_LT(ep8, 1.25 * ep128);
}

TEST_F(PublishedSweepTest, Ep8Tp8Batch1IsTheFastestSingleMachinePoint) {
  const std::vector<SweepPoint> ep8 = ParetoFrontier(PointsWithEp(*result_, 8));
  ASSERT_FALSE(ep8.empty());
  EXPECT_EQ(ep8.front().deployment.tp, 8);
  EXPECT_EQ(ep8.front().batch, 1);
  EXPECT_GT(ep8.front().estimate.speed, 100);
}

TEST_F(PublishedSweepTest, SingleMachineCannotServe128RequestsPerGpu) {
  int largest = 0;
  for (const SweepPoint& p : PointsWithEp(*result_, 8)) {
    if (p.deployment.tp == 1) largest = std::max(largest, p.batch);
  }
  EXPECT_GE(largest, 90);  // about 100 requests of 5000 tokens per GPU
  EXPECT_LT(largest, 128);
  bool skipped = false;
  for (const std::string& why : result_->skipped) {
    skipped = skipped || why.find("EP8 DP8 TP1") != std::string::npos;
  }
  EXPECT_TRUE(skipped);
}

TEST_F(PublishedSweepTest, HigherEpShiftsTheFrontierOut) {
  for (double speed : {40.0, 60.0}) {
    double previous = 0;
    for (int ep : {16, 32, 64, 128}) {
      const double thr = ThroughputAtSpeed(PointsWithEp(*result_, ep), speed);
      EXPECT_GE(thr, previous) << "EP" << ep << " at " << speed;
      previous = thr;
    }
  }
}

TEST_F(PublishedSweepTest, PickAnswersTheSpeedTarget) {
  PickResult pick = PickDeployment(*result_, 50);
  ASSERT_TRUE(pick.found);
  EXPECT_GE(pick.cheapest.estimate.speed, 50);
  EXPECT_GE(pick.best_throughput.estimate.speed, 50);
  EXPECT_EQ(pick.cheapest.deployment.ep, 8);  // one machine is the cheapest way to 50 tok/s
  EXPECT_EQ(pick.best_throughput.deployment.ep, 128);
  EXPECT_GE(pick.best_throughput.estimate.throughput_per_machine,
            pick.cheapest.estimate.throughput_per_machine);
  EXPECT_FALSE(PickDeployment(*result_, 1e6).found);
}

TEST_F(PublishedSweepTest, JsonAndCsvCarryTheDocumentedFields) {
  nlohmann::json json = SweepToJson(*result_);
  ASSERT_EQ(json["points"].size(), result_->points.size());
  for (const char* field : {"gpu", "ep", "dp", "tp", "machines", "batch", "mode", "step_us",
                            "moe_layer_us", "speed_tokens_per_s", "throughput_per_machine",
                            "throughput_per_gpu", "max_batch", "on_frontier"}) {
    EXPECT_TRUE(json["points"][0].contains(field)) << field;
  }
  const std::string csv = SweepToCsv(*result_);
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')),
            result_->points.size() + 1);
  nlohmann::json pick = PickToJson(PickDeployment(*result_, 50));
  EXPECT_TRUE(pick["found"].get<bool>());
  EXPECT_GE(pick["best_throughput"]["speed_tokens_per_s"].get<double>(), 50);
  nlohmann::json step = StepToJson(result_->points[0].estimate);
  for (const char* field : {"mode", "step_us", "speed_tokens_per_s", "throughput_per_machine",
                            "memory", "moe_layer", "dense_layer", "notes"}) {
    EXPECT_TRUE(step.contains(field)) << field;
  }
  EXPECT_TRUE(step["moe_layer"]["by_kind_us"].contains("group_gemm"));
  EXPECT_TRUE(step["moe_layer"]["dispatch"].contains("visible_us"));
}

TEST(ParseIntRangesTest, ListsAndRanges) {
  EXPECT_EQ(*ParseIntRanges("1,2,4", "x"), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(*ParseIntRanges("3-5,8", "x"), (std::vector<int>{3, 4, 5, 8}));
  EXPECT_EQ(ParseIntRanges("1-128", "x")->size(), 128u);
  EXPECT_FALSE(ParseIntRanges("1,a", "x").ok());
  EXPECT_FALSE(ParseIntRanges("5-3", "x").ok());
  EXPECT_FALSE(ParseIntRanges("0", "x").ok());
  EXPECT_FALSE(ParseIntRanges("", "x").ok());
  EXPECT_FALSE(ParseIntRanges("4-8x", "x").ok());
}

TEST(ParetoTest, KeepsOnlyUndominatedPoints) {
  auto point = [](double speed, double thr) {
    SweepPoint p;
    p.estimate.speed = speed;
    p.estimate.throughput_per_machine = thr;
    return p;
  };
  std::vector<SweepPoint> frontier =
      ParetoFrontier({point(10, 100), point(20, 50), point(15, 40), point(5, 90), point(30, 10)});
  ASSERT_EQ(frontier.size(), 3u);
  EXPECT_EQ(frontier[0].estimate.speed, 30);
  EXPECT_EQ(frontier[1].estimate.speed, 20);
  EXPECT_EQ(frontier[2].estimate.speed, 10);
  EXPECT_EQ(ThroughputAtSpeed(frontier, 12), 50);
  EXPECT_EQ(ThroughputAtSpeed(frontier, 31), 0);
}

}  // namespace
}  // namespace epserve::planner
