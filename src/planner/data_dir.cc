#include "planner/data_dir.h"

#include <filesystem>

#ifndef EPSERVE_PLANNER_DATA_DIR
#define EPSERVE_PLANNER_DATA_DIR "data/planner"
#endif

namespace epserve::planner {

std::string DefaultDataDir() { return EPSERVE_PLANNER_DATA_DIR; }
std::string DefaultHardwarePath() { return DefaultDataDir() + "/hardware.json"; }
std::string DefaultEfficiencyPath() { return DefaultDataDir() + "/efficiency.json"; }

std::string ResolveModelConfigPath(const std::string& model) {
  std::error_code error;
  if (std::filesystem::is_regular_file(model, error)) return model;
  if (std::filesystem::is_directory(model, error)) return model + "/config.json";
  return DefaultDataDir() + "/models/" + model + "/config.json";
}

}  // namespace epserve::planner
