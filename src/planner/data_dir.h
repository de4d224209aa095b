// Default locations of the planner's data files (hardware catalog, efficiency factors, model
// configs), compiled in from the source tree; every command can override them with flags.
#pragma once

#include <string>

namespace epserve::planner {

// The data/planner folder of the source tree this library was built from.
std::string DefaultDataDir();
std::string DefaultHardwarePath();    // <data>/hardware.json
std::string DefaultEfficiencyPath();  // <data>/efficiency.json
// A model argument is either a path to a config.json (or its folder) or the name of a folder
// under <data>/models ("deepseek-v3", "deepseek-v2-lite").
std::string ResolveModelConfigPath(const std::string& model);

}  // namespace epserve::planner
