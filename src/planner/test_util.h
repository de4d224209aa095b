// Shared setup for the planner tests: the checked-in data files (hardware catalog, efficiency
// factors, DeepSeek-V3 and V2-Lite configs) and the write-up's per-layer experiment.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "planner/data_dir.h"
#include "planner/efficiency.h"
#include "planner/hardware.h"
#include "planner/layer_model.h"
#include "planner/model_spec.h"
#include "planner/routing.h"

namespace epserve::planner::testing {

inline HardwareSpec Gpu(const std::string& name) {
  StatusOr<HardwareCatalog> catalog = HardwareCatalog::LoadFile(DefaultHardwarePath());
  EXPECT_TRUE(catalog.ok()) << catalog.status().ToString();
  StatusOr<HardwareSpec> spec = catalog->Find(name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return *spec;
}

inline ModelSpec Model(const std::string& name) {
  StatusOr<ModelSpec> model = LoadModelConfig(ResolveModelConfigPath(name));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return *model;
}

inline EfficiencyFactors Efficiency() {
  StatusOr<EfficiencyFactors> eff = LoadEfficiencyFile(DefaultEfficiencyPath());
  EXPECT_TRUE(eff.ok()) << eff.status().ToString();
  return *eff;
}

// Relative error helper for tolerance checks with readable failure messages.
inline double RelErr(double modeled, double published) { return modeled / published - 1.0; }

}  // namespace epserve::planner::testing
