// Fuzzes the two config.json readers: the runtime's ModelConfig::Parse (model/config.h) and
// the planner's ModelSpecFromConfig (planner/model_spec.h). A config Parse accepts must survive
// ToJson and parse again.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/fuzz_util.h"
#include "model/config.h"
#include "planner/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(epserve::fuzz::AsText(data, size));
  auto config = epserve::ModelConfig::Parse(text, "config.json");
  if (config.ok()) {
    (void)config->SoftmaxScale();
    (void)config->GateOpts();
    for (int layer = 0; layer < config->num_hidden_layers && layer < 4096; ++layer) {
      (void)config->IsMoeLayer(layer);
    }
    auto again = epserve::ModelConfig::Parse(config->ToJson(), "config.json (written back)");
    if (!again.ok()) {
      std::fprintf(stderr, "ToJson of an accepted config does not parse: %s\n",
                   again.status().message().c_str());
      std::abort();
    }
  }
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_discarded()) (void)epserve::planner::ModelSpecFromConfig(json, "config.json");
  return 0;
}
