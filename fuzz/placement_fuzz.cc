// Fuzzes the placement file reader (placement/placement_io.h). A placement it accepts has
// passed ValidatePlacement, so it must write back to JSON that parses again and map to SGLang's
// physical_to_logical_map.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "placement/placement_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(epserve::fuzz::AsText(data, size));
  auto placement = epserve::placement::PlacementFromJson(text, "placement.json");
  if (!placement.ok()) return 0;
  auto again = epserve::placement::PlacementFromJson(
      epserve::placement::PlacementToJson(*placement), "placement.json (written back)");
  if (!again.ok()) {
    std::fprintf(stderr, "an accepted placement does not round-trip: %s\n",
                 again.status().message().c_str());
    std::abort();
  }
  (void)epserve::placement::SglangPhysicalToLogical(*placement, {});
  return 0;
}
