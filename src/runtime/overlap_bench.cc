#include "runtime/overlap_bench.h"

#include <algorithm>
#include <map>
#include <random>

#include "base/timer.h"
#include "runtime/ep_replica.h"

namespace epserve {

StatusOr<std::vector<OverlapBenchRow>> RunOverlapBench(comm::MpiWorld& mpi,
                                                       const OverlapBenchOptions& o) {
  comm::Communicator& world = mpi.world();
  if (o.repeats < 1) return Status::InvalidArgument("--repeats must be >= 1");
  if (o.kv_len < 0) return Status::InvalidArgument("--kv-len must be >= 0");
  for (int b : o.batches)
    if (b < 1) return Status::InvalidArgument("--batches: every batch must be >= 1");
  std::unique_ptr<EpReplica> rep;
  EpError err = BuildEpReplica(
      mpi, {.model_dir = o.model_dir, .ranks_per_node = o.ranks_per_node, .threads = o.threads},
      &rep);
  if (!err.status.ok()) return err.status;
  if (rep->family == ModelFamily::kDeepSeekV4)
    return Status::InvalidArgument(o.model_dir +
                                   " is a DeepSeek-V4 checkpoint: bench moe-layer does not run V4");
  const ModelConfig& c = rep->config;
  Model& model = *rep->model;
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.IsMoeLayer(l) ? 1 : 0;
  if (moe_layers == 0) return Status::InvalidArgument(o.model_dir + ": model has no MoE layer");
  const int me = world.rank();
  auto remote_bytes = [&] {
    double sum = 0;
    for (const EpLayerStats& s : rep->experts->layer_stats())
      sum += static_cast<double>(s.dispatch.bytes_remote + s.combine.bytes_remote);
    return sum;
  };

  std::vector<OverlapBenchRow> rows;
  for (int batch : o.batches) {
    LatentKvCache cache = LatentKvCache::For(c, c.num_hidden_layers, batch, o.kv_len + 1);
    std::mt19937 rng(1000 * me + batch);
    std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
    ForwardBatch fb;
    for (int r = 0; r < batch; ++r) fb.chunks.push_back({.slot = r, .tokens = {token(rng)}});
    std::vector<float> logits(static_cast<size_t>(batch) * c.vocab_size);
    std::map<Overlap, std::vector<double>> pass_ms, moe_ms;
    std::map<Overlap, double> bytes;
    for (int rep_i = 0; rep_i <= o.repeats; ++rep_i) {  // repeat 0 warms up
      // Modes alternate within a repeat, starting one later each time (noise hits all alike).
      for (size_t k = 0; k < o.modes.size(); ++k) {
        const Overlap mode = o.modes[(k + rep_i) % o.modes.size()];
        model.SetOverlap({.mode = mode});
        for (int r = 0; r < batch; ++r) cache.set_length(r, o.kv_len);
        RETURN_IF_ERROR(world.Barrier());
        const double moe0 = model.times().moe_layers, bytes0 = remote_bytes();
        const double t0 = NowSeconds();
        RETURN_IF_ERROR(model.Forward(fb, cache, logits.data()));
        // The pass takes as long as its slowest rank.
        int64_t us[2] = {static_cast<int64_t>((NowSeconds() - t0) * 1e6),
                         static_cast<int64_t>((model.times().moe_layers - moe0) * 1e6)};
        float sent = static_cast<float>(remote_bytes() - bytes0);
        RETURN_IF_ERROR(world.AllReduceMax(us, 2));
        RETURN_IF_ERROR(world.AllReduceSum(&sent, 1));
        if (rep_i == 0) continue;
        pass_ms[mode].push_back(us[0] / 1e3);
        moe_ms[mode].push_back(us[1] / 1e3 / moe_layers);
        bytes[mode] = sent / moe_layers;
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (Overlap mode : o.modes)
      rows.push_back({.batch = batch,
                      .mode = mode,
                      .pass_ms = median(pass_ms[mode]),
                      .moe_layer_ms = median(moe_ms[mode]),
                      .remote_bytes_per_layer = bytes[mode]});
  }
  return rows;
}

}  // namespace epserve
