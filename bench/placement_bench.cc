// Placement time at DeepSeek-V3 scale: 58 MoE layers x 256 experts (top-8), synthetic trace with
// planted co-activation clusters, on one core. Goal: GRACE under 10 s.
// Usage: placement_bench [num_tokens=8192] [nodes=4] [ranks_per_node=8]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "placement/place.h"
#include "placement/synthetic.h"

using namespace epserve::placement;

int main(int argc, char** argv) {
  const int num_tokens = argc > 1 ? std::atoi(argv[1]) : 8192;
  const Topology topology{argc > 2 ? std::atoi(argv[2]) : 4, argc > 3 ? std::atoi(argv[3]) : 8};
  const ModelShape v3{.name = "deepseek-v3-synthetic",
                      .num_experts = 256,
                      .top_k = 8,
                      .hidden_size = 7168,
                      .moe_intermediate_size = 2048,
                      .num_hidden_layers = 61,
                      .num_expert_groups = 8};
  auto start = std::chrono::steady_clock::now();
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{.shape = v3,
                                                               .num_layers = 58,
                                                               .num_tokens = num_tokens,
                                                               .num_sequences = 64,
                                                               .num_clusters = 16,
                                                               .in_cluster = 0.7,
                                                               .skew = 1.0,
                                                               .seed = 7});
  const double gen_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("synthetic trace: 58 layers x 256 experts, top-8, %d tokens (%.2f s to make)\n",
              num_tokens, gen_s);
  for (Strategy strategy : {Strategy::kContiguous, Strategy::kEplb, Strategy::kGrace}) {
    PlaceOptions options;
    options.topology = topology;
    options.strategy = strategy;
    options.redundant = strategy == Strategy::kEplb ? topology.num_ranks() : 0;
    start = std::chrono::steady_clock::now();
    epserve::StatusOr<PlaceResult> result = Place(trace, options);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result.ok()) {
      std::fprintf(stderr, "error: %s\n", result.status().message().c_str());
      return 1;
    }
    std::printf("%-10s on %d x %d ranks, 1 thread: %.2f s (%d extra copies)%s\n",
                std::string(StrategyName(strategy)).c_str(), topology.num_nodes,
                topology.ranks_per_node, s, result->placement.NumExtraCopies(),
                strategy == Strategy::kGrace
                    ? (s < 10 ? "  [goal < 10 s: met]" : "  [goal < 10 s: MISSED]")
                    : "");
  }
  return 0;
}
