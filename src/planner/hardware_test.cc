#include "planner/hardware.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace epserve::planner {
namespace {

TEST(HardwareCatalogTest, ShippedCatalogHasTheWriteUpsGpus) {
  StatusOr<HardwareCatalog> catalog = HardwareCatalog::LoadFile(DefaultHardwarePath());
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  for (const char* name : {"H100", "H200", "H800", "B200"}) {
    EXPECT_TRUE(catalog->Find(name).ok()) << name;
  }
  // SPEC §6: H100 1979 TFLOP/s FP8 and 3.35 TB/s; H200 same compute, 4.8 TB/s, 141 GB.
  HardwareSpec h100 = *catalog->Find("h100");  // case-insensitive
  EXPECT_EQ(h100.fp8_tflops, 1979);
  EXPECT_EQ(h100.memory_bandwidth_tbs, 3.35);
  HardwareSpec h200 = *catalog->Find("H200");
  EXPECT_EQ(h200.fp8_tflops, 1979);
  EXPECT_EQ(h200.memory_bandwidth_tbs, 4.8);
  EXPECT_EQ(h200.memory_gb, 141);
  EXPECT_DOUBLE_EQ(h200.PeakFlopsPerSecond(Precision::kBf16), 989e12);
}

TEST(HardwareCatalogTest, UnknownGpuNamesTheKnownOnes) {
  StatusOr<HardwareCatalog> catalog = HardwareCatalog::LoadFile(DefaultHardwarePath());
  ASSERT_TRUE(catalog.ok());
  StatusOr<HardwareSpec> missing = catalog->Find("A100");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("unknown GPU 'A100'"), std::string::npos);
  EXPECT_NE(missing.status().message().find("H200"), std::string::npos);
}

TEST(HardwareCatalogTest, RejectsBadEntries) {
  nlohmann::json good = {{"name", "X"},         {"fp8_tflops", 1},           {"bf16_tflops", 1},
                         {"memory_gb", 1},      {"memory_bandwidth_tbs", 1}, {"nvlink_gbs", 1},
                         {"infiniband_gbs", 1}, {"gpus_per_machine", 4}};
  EXPECT_TRUE(HardwareCatalog::FromJson({{"gpus", {good}}}).ok());
  nlohmann::json negative = good;
  negative["memory_bandwidth_tbs"] = -1;
  StatusOr<HardwareCatalog> bad = HardwareCatalog::FromJson({{"gpus", {negative}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("memory_bandwidth_tbs"), std::string::npos);
  nlohmann::json missing = good;
  missing.erase("nvlink_gbs");
  EXPECT_FALSE(HardwareCatalog::FromJson({{"gpus", {missing}}}).ok());
  EXPECT_FALSE(HardwareCatalog::FromJson({{"gpus", {good, good}}}).ok());  // duplicate
  EXPECT_FALSE(HardwareCatalog::FromJson({{"gpus", nlohmann::json::array()}}).ok());
  EXPECT_FALSE(HardwareCatalog::LoadFile("/nonexistent/hardware.json").ok());
}

}  // namespace
}  // namespace epserve::planner
