#include "tools/cpu_planner.h"

#include "planner/data_dir.h"

namespace epserve::tools {

StatusOr<planner::HardwareSpec> LoadCpuHardware(const std::string& path, const std::string& flag) {
  ASSIGN_OR_RETURN(planner::HardwareCatalog catalog, planner::HardwareCatalog::LoadFile(path));
  StatusOr<planner::HardwareSpec> hw = catalog.Find("cpu");
  if (!hw.ok() && catalog.specs().size() == 1) hw = catalog.specs()[0];
  if (!hw.ok())
    return Status::InvalidArgument(flag + " " + path +
                                   ": no entry \"cpu\" and more than one entry");
  return hw;
}

StatusOr<planner::EfficiencyFactors> LoadPlannerEfficiency(const std::string& path) {
  return planner::LoadEfficiencyFile(path.empty() ? planner::DefaultEfficiencyPath() : path);
}

}  // namespace epserve::tools
