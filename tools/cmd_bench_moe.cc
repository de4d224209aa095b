// `epserve bench moe-layer`: sparse dispatch/combine vs the padded baseline, under mpirun; with
// --overlap, decode passes under each overlap mode (runtime/overlap_bench.h).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "runtime/loaded_model.h"
#include "runtime/moe_layer_bench.h"
#include "runtime/overlap_bench.h"
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
  std::vector<std::string> overlap;  // non-empty: the overlap bench, these modes
  int kv_len = 256;
};

// The overlap bench's table (or JSON) on rank 0.
void PrintOverlap(const MoeFlags& f, const std::string& dir, int ranks,
                  const std::vector<OverlapBenchRow>& rows) {
  if (f.json) {
    nlohmann::json j = {{"model", dir}, {"ranks", ranks}, {"kv_len", f.kv_len}};
    j["rows"] = nlohmann::json::array();
    for (const auto& r : rows)
      j["rows"].push_back({{"batch", r.batch},
                           {"overlap", OverlapName(r.mode)},
                           {"pass_ms", r.pass_ms},
                           {"moe_layer_ms", r.moe_layer_ms},
                           {"cross_machine_bytes_per_layer", r.remote_bytes_per_layer}});
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "decode passes of %s on %d ranks, KV %d; per MoE layer = the MoE layers' wall time / their "
      "number; the slowest rank, median of %d repeats, modes alternating\n",
      dir.c_str(), ranks, f.kv_len, f.repeats);
  std::printf("%-8s %-12s %10s %14s %16s\n", "batch", "overlap", "pass ms", "MoE layer ms",
              "cross-machine KB");
  for (const auto& r : rows)
    std::printf("%-8d %-12s %10.3f %14.3f %16.1f\n", r.batch, OverlapName(r.mode), r.pass_ms,
                r.moe_layer_ms, r.remote_bytes_per_layer / 1e3);
  // Micro-batching against dispatch overlap, batch by batch; the crossover is the smallest
  // batch from which it wins at every larger batch measured.
  std::string from;
  for (const auto& a : rows) {
    if (a.mode != Overlap::kMicroBatch) continue;
    for (const auto& b : rows) {
      if (b.batch != a.batch || b.mode != Overlap::kDispatch) continue;
      const double ratio = a.moe_layer_ms / std::max(1e-9, b.moe_layer_ms);
      std::printf("batch %d: microbatch / dispatch MoE layer time %.2f\n", a.batch, ratio);
      if (ratio >= 1)
        from.clear();
      else if (from.empty())
        from = std::to_string(a.batch);
    }
  }
  std::printf("crossover: %s\n", from.empty()
                                     ? "micro-batching does not win at the largest batch measured"
                                     : ("micro-batching wins from batch " + from + " on").c_str());
}

Status RunMoe(const MoeFlags& f, CommandContext& ctx) {
  if (!comm::LaunchedByMpi())
    return Status::InvalidArgument("bench moe-layer runs under mpirun -np N (N >= 2)");
  std::string dir = f.model;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, EnsureDefaultModel());
  }
  std::vector<Overlap> modes;
  for (const std::string& m : f.overlap) {
    ASSIGN_OR_RETURN(const Overlap mode, ParseOverlap(m));
    modes.push_back(mode);
  }
  ASSIGN_OR_RETURN(auto mpi,
                   comm::MpiWorld::Init(nullptr, nullptr, {.timeout_seconds = f.timeout}));
  const int rank = mpi->world().rank();
  // Every rank finds a failure alike; rank 0 prints it once.
  auto failed = [&](const Status& st) {
    if (st.ok()) return false;
    if (rank == 0) std::fprintf(stderr, "epserve: error: %s\n", st.message().c_str());
    ctx.exit_code = 1;
    return true;
  };
  if (!modes.empty()) {
    auto rows = RunOverlapBench(*mpi, {.model_dir = dir,
                                       .batches = f.batches,
                                       .modes = modes,
                                       .repeats = f.repeats,
                                       .kv_len = f.kv_len,
                                       .ranks_per_node = f.ranks_per_node,
                                       .threads = f.threads});
    if (!failed(rows.status()) && rank == 0) PrintOverlap(f, dir, mpi->world().size(), *rows);
    return Status::Ok();
  }
  auto rows = RunMoeLayerBench(*mpi, {.model_dir = dir,
                                      .batches = f.batches,
                                      .skewed_batch = f.skewed,
                                      .repeats = f.repeats,
                                      .ranks_per_node = f.ranks_per_node,
                                      .threads = f.threads});
  if (failed(rows.status())) return Status::Ok();
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
  cmd->add_option("--overlap", f->overlap,
                  "instead: decode passes (all layers, every rank --batches requests at --kv-len "
                  "cached positions) under these overlap modes (comma-separated: none, dispatch, "
                  "microbatch), alternating in one run; pass and per-MoE-layer time")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "dispatch", "microbatch"}));
  cmd->add_option("--kv-len", f->kv_len, "with --overlap: cached positions of every request")
      ->check(IntRange(0, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = RunMoe(*f, ctx);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
