// The checkpoint a model benchmark (`bench decode`, `bench prefill`) runs on, and its flags.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/loaded_model.h"

namespace epserve::tools {

struct BenchModelFlags {
  std::string model;               // checkpoint directory; empty: the bench preset
  std::string dtype = "fp8";       // of the bench preset
  std::string weights = "copied";  // copied | mapped (LoadOptions::Memory)
  std::string requant = "none";    // none | int8 (LoadOptions::Requant)
};

// --model, --dtype, --weights and --requant.
void AddBenchModelFlags(CLI::App* cmd, BenchModelFlags* flags);

struct BenchModel {
  std::string dir;
  std::unique_ptr<LoadedModel> loaded;
};

// Loads --model, or the bench preset in --dtype (written on first use, with progress on a
// terminal).
StatusOr<BenchModel> LoadBenchModel(const BenchModelFlags& flags);

}  // namespace epserve::tools
