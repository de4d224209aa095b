// Fuzzes the planner's JSON inputs: the hardware catalog and one GPU spec (planner/hardware.h)
// and the efficiency factors (planner/efficiency.h). Each input is read as all three; what is
// accepted must write back to JSON that is accepted again.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "planner/efficiency.h"
#include "planner/hardware.h"

namespace {

void Fail(const char* what, const epserve::Status& status) {
  std::fprintf(stderr, "%s does not round-trip: %s\n", what, status.message().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = epserve::planner;
  const nlohmann::json json = nlohmann::json::parse(epserve::fuzz::AsText(data, size), nullptr,
                                                    /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  if (auto catalog = planner::HardwareCatalog::FromJson(json); catalog.ok()) {
    for (const std::string& name : catalog->Names()) {
      if (auto found = catalog->Find(name); !found.ok()) Fail("a catalog name", found.status());
    }
    (void)catalog->Find("no such gpu");
  }
  if (auto spec = planner::HardwareSpecFromJson(json); spec.ok()) {
    auto again = planner::HardwareSpecFromJson(planner::HardwareSpecToJson(*spec));
    if (!again.ok()) Fail("a hardware spec", again.status());
  }
  if (auto factors = planner::EfficiencyFromJson(json); factors.ok()) {
    auto again = planner::EfficiencyFromJson(planner::EfficiencyToJson(*factors));
    if (!again.ok()) Fail("efficiency factors", again.status());
  }
  return 0;
}
