// --replace-every / --replace-window / --replace-slots: online re-placement of the experts
// (runtime/online_placer.h; docs/expert-parallelism.md, "Re-placing experts while serving"),
// shared by generate, engine and serve (which hands them to the world it starts).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/online_placer.h"

namespace epserve::tools {

struct ReplaceFlags {
  int every = -1;  // -1: off; 0: on SIGUSR2 only; N: every N steps
  int64_t window = 8192;
  int slots = -1;  // -1: DefaultRedundantSlots

  void AddTo(CLI::App* cmd, const std::string& group);
  // Unset unless --replace-every was given.
  std::optional<OnlinePlacerOptions> Options() const;
  // The flags again, for a child command line (empty when off).
  std::vector<std::string> Args() const;
};

}  // namespace epserve::tools
