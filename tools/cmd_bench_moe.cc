// `epserve bench moe-layer`: sparse dispatch/combine vs the padded baseline, under mpirun.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/loaded_model.h"
#include "runtime/moe_layer_bench.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {
struct MoeFlags {
  std::string model;
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128};
  int skewed = 128, repeats = 5, ranks_per_node = 0, threads = 1;
  double timeout = 120.0;
  bool json = false;
};

Status RunMoe(const MoeFlags& f, CommandContext& ctx) {
  if (!comm::LaunchedByMpi())
    return Status::InvalidArgument("bench moe-layer runs under mpirun -np N (N >= 2)");
  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  ASSIGN_OR_RETURN(auto mpi,
                   comm::MpiWorld::Init(nullptr, nullptr, {.timeout_seconds = f.timeout}));
  auto rows = RunMoeLayerBench(*mpi, {.model_dir = dir,
                                      .batches = f.batches,
                                      .skewed_batch = f.skewed,
                                      .repeats = f.repeats,
                                      .ranks_per_node = f.ranks_per_node,
                                      .threads = f.threads});
  const int rank = mpi->world().rank();
  if (!rows.ok()) {
    if (rank == 0) std::fprintf(stderr, "epserve: error: %s\n", rows.status().message().c_str());
    ctx.exit_code = 1;
    return Status::Ok();
  }
  if (rank != 0) return Status::Ok();
  const int n = mpi->world().size();
  if (f.json) {
    nlohmann::json j;
    j["model"] = dir;
    j["ranks"] = n;
    for (const auto& r : *rows)
      j["rows"].push_back(
          {{"label", r.label},
           {"tokens_rank0", r.tokens_rank0},
           {"tokens_other_ranks", r.tokens_other},
           {"sparse_bytes", r.sparse_bytes},
           {"padded_bytes", r.padded_bytes},
           {"sparse_cross_machine_bytes", r.sparse_remote_bytes},
           {"padded_cross_machine_bytes", r.padded_remote_bytes},
           {"bytes_ratio_padded_over_sparse", r.padded_bytes / std::max(1.0, r.sparse_bytes)},
           {"sparse_ms", r.sparse_ms},
           {"padded_ms", r.padded_ms},
           {"time_ratio_padded_over_sparse", r.padded_ms / std::max(1e-9, r.sparse_ms)}});
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "one MoE layer of %s on %d ranks; bytes = dispatch + combine over all ranks, time = median "
      "of the slowest rank\n",
      dir.c_str(), n);
  std::printf("%-16s %12s %12s %8s %10s %10s %8s\n", "tokens/rank", "sparse MB", "padded MB",
              "bytes x", "sparse ms", "padded ms", "time x");
  for (const auto& r : *rows)
    std::printf("%-16s %12.3f %12.3f %8.2f %10.3f %10.3f %8.2f\n", r.label.c_str(),
                r.sparse_bytes / 1e6, r.padded_bytes / 1e6,
                r.padded_bytes / std::max(1.0, r.sparse_bytes), r.sparse_ms, r.padded_ms,
                r.padded_ms / std::max(1e-9, r.sparse_ms));
  return Status::Ok();
}
}  // namespace

void AddBenchMoeLayerCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<MoeFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "moe-layer",
      "Under mpirun: one MoE layer, sparse dispatch/combine (ours) vs the padded all-to-all "
      "baseline;\n"
      "bytes on the wire and time, as ratios measured in the same run, plus a skewed case.");
  cmd->add_option("--model", f->model, "checkpoint directory (default: the embedded tiny model)");
  cmd->add_option("--batches", f->batches, "tokens per rank (comma-separated)")
      ->delimiter(',')
      ->check(IntRange(1, 65536))
      ->capture_default_str();
  cmd->add_option("--skewed", f->skewed,
                  "rank 0's tokens in the skewed case (others have 1; 0 = skip)")
      ->check(IntRange(0, 65536))
      ->capture_default_str();
  cmd->add_option("--repeats", f->repeats, "timed repeats per case")
      ->check(IntRange(1, 100000))
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "emulate machines of K ranks (0: as MPI reports)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "threads per rank")
      ->check(IntRange(1, MaxThreads()))
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout,
                  "seconds a rank waits for its peers (any collective, start-up included) before "
                  "giving up")
      ->check(PositiveReal())
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = RunMoe(*f, ctx);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
