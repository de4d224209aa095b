// `epserve bench sparse-attention`: one decode step's attention at DeepSeek-V3.2's shapes and
// long contexts, V3's dense MLA against V3.2's DSA (kernels/sparse_attention_bench.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/sparse_attention_bench.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct SparseFlags {
  std::vector<int64_t> contexts = {8192, 16384, 32768};
  int batch = 1;
  int threads = 0;
  int repeats = 3;
  bool json = false;
};

}  // namespace

void AddBenchSparseAttentionCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<SparseFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "sparse-attention",
      "One decode step's attention per layer at DeepSeek-V3.2's real shapes (128 heads, latent\n"
      "512 + rope 64, bf16 cache; indexer 64 x 128, top 2048), at long contexts: V3's dense MLA\n"
      "over every cached position against V3.2's DSA (the indexer's projections, its keys scored\n"
      "at every position, the top 2048 chosen, MLA over those), with the bytes and FLOPs each\n"
      "must move. Random cache and weights (no prefill); the rest of the layer, the same in both,\n"
      "is left out. docs/benchmarks.md, \"Sparse attention\".");
  cmd->add_option("--contexts", f->contexts, "cached positions per sequence (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--batch", f->batch, "sequences per step, each with its own context")
      ->check(IntRange(1, 256))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  cmd->add_option("--repeats", f->repeats, "steps per measurement; the best is reported")
      ->check(IntRange(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    (void)ctx;
    ThreadPool pool(f->threads > 0 ? f->threads : ThreadPool::DefaultThreads());
    const auto rows = kernels::RunSparseAttentionBench(
        {.contexts = f->contexts, .batch = f->batch, .repeats = f->repeats}, pool);
    if (f->json) {
      nlohmann::ordered_json j;
      j["threads"] = pool.num_threads();
      j["batch"] = f->batch;
      j["rows"] = nlohmann::ordered_json::array();
      for (const auto& r : rows)
        j["rows"].push_back({{"context", r.context},
                             {"dense_seconds", r.dense_seconds},
                             {"sparse_seconds", r.sparse_seconds},
                             {"indexer_seconds", r.indexer_seconds},
                             {"dense_bytes", r.dense_bytes},
                             {"sparse_bytes", r.sparse_bytes},
                             {"dense_flops", r.dense_flops},
                             {"sparse_flops", r.sparse_flops}});
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("threads: %d, batch: %d (one layer's attention per decode step)\n",
                pool.num_threads(), f->batch);
    std::printf("%8s %10s %10s %12s %8s %10s %10s %10s %10s\n", "context", "dense ms", "DSA ms",
                "(indexer ms)", "speedup", "dense MB", "DSA MB", "dense GF", "DSA GF");
    for (const auto& r : rows)
      std::printf("%8lld %10.2f %10.2f %12.2f %7.2fx %10.1f %10.1f %10.2f %10.2f\n",
                  static_cast<long long>(r.context), r.dense_seconds * 1e3, r.sparse_seconds * 1e3,
                  r.indexer_seconds * 1e3, r.dense_seconds / r.sparse_seconds, r.dense_bytes / 1e6,
                  r.sparse_bytes / 1e6, r.dense_flops / 1e9, r.sparse_flops / 1e9);
  });
}

}  // namespace epserve::tools
