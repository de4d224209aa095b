// --overlap none|dispatch|microbatch|auto (Model's OverlapOptions; docs/expert-parallelism.md,
// "Overlap"), shared by generate, serve, engine and bench engine.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace epserve::tools {

struct OverlapFlags {
  std::string mode = "dispatch";
  // auto: micro-batch from this many tokens per DP group and step; 0: the planner's crossover.
  int64_t microbatch_from = 0;
  std::string planner_hardware;  // auto without --microbatch-from: the calibrated catalog

  void AddTo(CLI::App* cmd, const std::string& group = "");
  // Checks the flags and resolves auto (the planner reads model_dir/config.json). ep, tp and
  // ranks_per_machine describe this deployment (1, 1, 1 in one process); query_len is 2 with
  // MTP, else 1.
  // With auto and the planner, *note says what it chose (one line, for the log).
  StatusOr<OverlapOptions> Options(const std::string& model_dir, int ep, int tp,
                                   int ranks_per_machine, int query_len,
                                   std::string* note = nullptr) const;
  // The flags again, for a child command line.
  std::vector<std::string> Args() const;
};

}  // namespace epserve::tools
