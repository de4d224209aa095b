#include "tools/bench_model.h"

#include <unistd.h>

#include <cstdio>

#include "tools/flag_checks.h"

namespace epserve::tools {

void AddBenchModelFlags(CLI::App* cmd, BenchModelFlags* f) {
  cmd->add_option("--model", f->model, "checkpoint directory (default: the bench preset)");
  cmd->add_option("--dtype", f->dtype, "bf16 | fp8, for the default bench model")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--weights", f->weights,
                  "mapped: stream weights from the checkpoint's file mapping; copied: copy them "
                  "once into anonymous memory on huge pages")
      ->check(CLI::IsMember({"mapped", "copied"}))
      ->capture_default_str();
  AddRequantFlag(cmd, &f->requant);
}

StatusOr<BenchModel> LoadBenchModel(const BenchModelFlags& f) {
  BenchModel m{.dir = f.model};
  if (m.dir.empty()) {
    auto progress = [](int done, int total) {
      if (::isatty(2))
        std::fprintf(stderr, "\rwrote shard %d/%d%s", done, total, done == total ? "\n" : "");
    };
    ASSIGN_OR_RETURN(m.dir, EnsurePresetModel("bench", f.dtype == "fp8", 4, progress));
  }
  ASSIGN_OR_RETURN(m.loaded,
                   LoadModel(m.dir, {.memory = f.weights == "copied" ? LoadOptions::Memory::kCopied
                                                                     : LoadOptions::Memory::kMapped,
                                     .requant = RequantFromFlag(f.requant),
                                     // bench decode / prefill never run the MTP module
                                     .mtp = LoadOptions::Mtp::kSkip}));
  return m;
}

}  // namespace epserve::tools
