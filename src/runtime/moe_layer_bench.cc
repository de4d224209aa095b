#include "runtime/moe_layer_bench.h"

#include <algorithm>
#include <random>
#include <set>

#include "base/timer.h"
#include "kernels/gate.h"
#include "kernels/matmul.h"
#include "placement/router.h"
#include "runtime/ep_experts.h"
#include "runtime/loaded_model.h"

namespace epserve {

namespace {

struct ModeResult {
  double bytes = 0, remote_bytes = 0, ms = 0;
};

}  // namespace

StatusOr<std::vector<MoeLayerBenchRow>> RunMoeLayerBench(comm::MpiWorld& mpi,
                                                         const MoeLayerBenchOptions& o) {
  comm::Communicator& world = mpi.world();
  const int n = world.size(), me = world.rank();
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(o.model_dir + "/config.json"));
  ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::Parse(text, o.model_dir + "/config.json"));
  if (n > c.n_routed_experts) return Status::InvalidArgument("more ranks than routed experts");
  if (o.repeats < 1) return Status::InvalidArgument("--repeats must be >= 1");
  for (int b : o.batches)
    if (b < 1) return Status::InvalidArgument("--batches: every batch must be >= 1");
  if (o.skewed_batch < 0) return Status::InvalidArgument("--skewed must be >= 0");
  int rpn = o.ranks_per_node > 0 ? o.ranks_per_node : n / mpi.num_nodes();
  if (rpn <= 0 || n % rpn)
    return Status::InvalidArgument("--ranks-per-node must divide the number of ranks");
  std::vector<int> node_of(n);
  for (int r = 0; r < n; ++r) node_of[r] = r / rpn;
  placement::Placement plan = ContiguousPlacement(c, n, rpn);
  if (plan.layers.empty()) return Status::InvalidArgument(o.model_dir + ": model has no MoE layer");
  const int layer = plan.layers[0].layer_id;  // the first MoE layer
  ASSIGN_OR_RETURN(placement::Router router, placement::Router::Create(plan, plan.routing));
  std::set<int> mine(plan.layers[0].slots[me].begin(), plan.layers[0].slots[me].end());
  ASSIGN_OR_RETURN(auto lm, LoadModel(o.model_dir, {.want_expert = [&](int l, int e) {
                                        return l == layer && mine.count(e) > 0;
                                      }}));
  ThreadPool pool(o.threads);
  const int H = c.hidden_size, K = c.num_experts_per_tok, E = c.n_routed_experts;

  // Runs the layer with `tokens` tokens on this rank in one mode; returns this rank's figures.
  auto run = [&](int tokens, comm::A2aMode mode) -> StatusOr<ModeResult> {
    std::mt19937 rng(1000 * me + tokens);
    std::normal_distribution<float> dist;
    std::vector<float> x(static_cast<size_t>(tokens) * H), logits(static_cast<size_t>(tokens) * E),
        out(x.size());
    for (float& v : x) v = dist(rng);
    kernels::MatMul({.x = x.data(),
                     .num_rows = tokens,
                     .w = lm->weights->layers[layer].moe->router,
                     .y = logits.data()},
                    pool);
    std::vector<int32_t> ids(static_cast<size_t>(tokens) * K);
    std::vector<float> w(ids.size()), scratch(2 * E);
    const auto& bias = lm->weights->layers[layer].moe->score_bias;
    for (int t = 0; t < tokens; ++t)
      kernels::GateTopK(c.GateOpts(), &logits[static_cast<size_t>(t) * E],
                        bias.empty() ? nullptr : bias.data(), scratch.data(),
                        &ids[static_cast<size_t>(t) * K], &w[static_cast<size_t>(t) * K]);
    comm::Dispatcher dispatcher(world, node_of, {.hidden = H, .top_k = K, .mode = mode});
    const ModelExpertTable table(*lm->weights);
    EpExperts experts(dispatcher, plan, router, table, pool, c.num_hidden_layers, E);
    std::vector<double> times;
    for (int rep = 0; rep <= o.repeats; ++rep) {  // rep 0 warms up
      RETURN_IF_ERROR(world.Barrier());
      const double t0 = NowSeconds();
      RETURN_IF_ERROR(experts.Start(0, {.layer = layer,
                                        .num_tokens = tokens,
                                        .hidden = H,
                                        .top_k = K,
                                        .x = x.data(),
                                        .expert_ids = ids.data(),
                                        .weights = w.data()}));
      RETURN_IF_ERROR(experts.Compute(0));
      RETURN_IF_ERROR(experts.Finish(0, out.data()));
      double dt = NowSeconds() - t0;
      // The layer takes as long as its slowest rank.
      int64_t us = static_cast<int64_t>(dt * 1e6);
      RETURN_IF_ERROR(world.AllReduceMax(&us, 1));
      if (rep > 0) times.push_back(us / 1e3);
    }
    std::sort(times.begin(), times.end());
    const auto& s = experts.layer_stats()[layer];
    ModeResult r;
    r.ms = times[times.size() / 2];
    const auto& d = s.dispatch;
    const auto& cb = s.combine;
    const double reps = o.repeats + 1;
    r.bytes = (d.bytes_self + d.bytes_node + d.bytes_remote + cb.bytes_self + cb.bytes_node +
               cb.bytes_remote) /
              reps;
    r.remote_bytes = (d.bytes_remote + cb.bytes_remote) / reps;
    return r;
  };

  std::vector<MoeLayerBenchRow> rows;
  auto add_row = [&](const std::string& label, int t0, int t_other) -> Status {
    const int tokens = me == 0 ? t0 : t_other;
    ASSIGN_OR_RETURN(ModeResult sparse, run(tokens, comm::A2aMode::kSparse));
    ASSIGN_OR_RETURN(ModeResult padded, run(tokens, comm::A2aMode::kPadded));
    // Sum bytes over ranks.
    std::vector<float> v = {static_cast<float>(sparse.bytes), static_cast<float>(padded.bytes),
                            static_cast<float>(sparse.remote_bytes),
                            static_cast<float>(padded.remote_bytes)};
    RETURN_IF_ERROR(world.AllReduceSum(v.data(), 4));
    rows.push_back({.label = label,
                    .tokens_rank0 = t0,
                    .tokens_other = t_other,
                    .sparse_bytes = v[0],
                    .padded_bytes = v[1],
                    .sparse_remote_bytes = v[2],
                    .padded_remote_bytes = v[3],
                    .sparse_ms = sparse.ms,
                    .padded_ms = padded.ms});
    return Status::Ok();
  };
  for (int b : o.batches) RETURN_IF_ERROR(add_row("batch " + std::to_string(b), b, b));
  if (o.skewed_batch > 0)
    RETURN_IF_ERROR(add_row("skewed " + std::to_string(o.skewed_batch) + "/1", o.skewed_batch, 1));
  return rows;
}

}  // namespace epserve
