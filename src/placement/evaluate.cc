#include "placement/evaluate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "placement/router.h"
#include "placement/token_key.h"

namespace epserve::placement {
namespace {

// Where each token starts and in which step its rank processes it.
struct TokenSchedule {
  std::vector<int> src_rank;
  std::vector<int> step;
  int num_steps = 0;
};

TokenSchedule Schedule(const Trace& trace, int num_ranks, int step_tokens, uint64_t deal_seed) {
  TokenSchedule s;
  std::vector<uint32_t> order = trace.SequenceOrder();
  if (deal_seed != 0) {
    // Fisher-Yates with the project's hash, so every platform deals alike.
    for (size_t i = order.size(); i > 1; --i) {
      const size_t j = MixHash(deal_seed * 0x9e3779b97f4a7c15ULL + i) % i;
      std::swap(order[i - 1], order[j]);
    }
  }
  std::unordered_map<uint32_t, int> seq_index;
  for (uint32_t id : order) {
    const int idx = static_cast<int>(seq_index.size());
    seq_index[id] = idx;
  }
  std::vector<int64_t> queued(num_ranks, 0);
  s.src_rank.resize(trace.num_tokens());
  s.step.resize(trace.num_tokens());
  for (int64_t t = 0; t < trace.num_tokens(); ++t) {
    const int r = seq_index[trace.sequence_id(t)] % num_ranks;
    s.src_rank[t] = r;
    s.step[t] = static_cast<int>(queued[r]++ / step_tokens);
    s.num_steps = std::max(s.num_steps, s.step[t] + 1);
  }
  return s;
}

// Per-step counters of one layer.
struct StepCounters {
  std::vector<int32_t> expert_tokens;       // [rank * num_experts + expert]
  std::vector<int64_t> ib_send, ib_recv;    // per machine, (token, machine) copies
  std::vector<int64_t> nvl_send, nvl_recv;  // per rank, NVLink copies
};

LoadStats Stats(const std::vector<double>& per_rank) {
  LoadStats s;
  const double n = static_cast<double>(per_rank.size());
  for (double v : per_rank) {
    s.max = std::max(s.max, v);
    s.mean += v / n;
  }
  for (double v : per_rank) s.stddev += (v - s.mean) * (v - s.mean) / n;
  s.stddev = std::sqrt(s.stddev);
  s.idle_fraction = s.max > 0 ? 1.0 - s.mean / s.max : 0.0;
  return s;
}

struct LayerJob {
  const Trace& trace;
  const Router& router;
  const TokenSchedule& schedule;
  const CostModel& cost;
  int trace_layer;
  int placement_layer;
};

LayerEvaluation EvaluateLayer(const LayerJob& job) {
  const Topology& topo = job.router.topology();
  const int num_ranks = topo.num_ranks();
  const int per_node = topo.ranks_per_node;
  const ModelShape& shape = job.trace.shape();
  const int n = shape.num_experts;
  const int k = shape.top_k;
  std::vector<StepCounters> steps(job.schedule.num_steps);
  for (StepCounters& c : steps) {
    c.expert_tokens.assign(static_cast<size_t>(num_ranks) * n, 0);
    c.ib_send.assign(topo.num_nodes, 0);
    c.ib_recv.assign(topo.num_nodes, 0);
    c.nvl_send.assign(num_ranks, 0);
    c.nvl_recv.assign(num_ranks, 0);
  }
  LayerEvaluation eval;
  TrafficCounts& traffic = eval.traffic;
  std::vector<double> rank_load(num_ranks, 0.0);
  std::vector<int> dest_ranks, dest_nodes;
  std::vector<int32_t> token_experts(k);
  std::vector<int> token_ranks(k);
  for (int64_t t = 0; t < job.trace.num_tokens(); ++t) {
    const int src = job.schedule.src_rank[t];
    const int src_node = topo.NodeOf(src);
    StepCounters& c = steps[job.schedule.step[t]];
    const uint16_t* experts = job.trace.Experts(job.trace_layer, t);
    dest_ranks.clear();
    dest_nodes.clear();
    token_experts.assign(experts, experts + k);
    // The engine keys copies by (sequence, position) too, so a replay of an engine trace picks
    // exactly the copies the engine picked.
    job.router.PickRanks(job.placement_layer, token_experts, src,
                         TokenKey(job.trace.sequence_id(t), job.trace.position(t)), token_ranks);
    for (int i = 0; i < k; ++i) {
      const int d = token_ranks[i];
      ++c.expert_tokens[static_cast<size_t>(d) * n + experts[i]];
      rank_load[d] += 1;
      if (std::find(dest_ranks.begin(), dest_ranks.end(), d) == dest_ranks.end()) {
        dest_ranks.push_back(d);
      }
      const int node = topo.NodeOf(d);
      if (std::find(dest_nodes.begin(), dest_nodes.end(), node) == dest_nodes.end()) {
        dest_nodes.push_back(node);
      }
    }
    for (int d : dest_ranks) {
      if (d == src) {
        ++traffic.rank_local;
      } else if (topo.NodeOf(d) == src_node) {
        ++traffic.rank_intra;
        ++c.nvl_send[src];
        ++c.nvl_recv[d];
      } else {
        ++traffic.rank_cross;
      }
    }
    for (int node : dest_nodes) {
      if (node == src_node) {
        ++traffic.machine_local;
        continue;
      }
      ++traffic.machine_cross;
      ++c.ib_send[src_node];
      ++c.ib_recv[node];
      const int arrival = node * per_node + topo.LocalIndex(src);
      for (int d : dest_ranks) {
        if (topo.NodeOf(d) == node && d != arrival) {
          ++c.nvl_send[arrival];
          ++c.nvl_recv[d];
        }
      }
    }
  }

  const double token_bytes = static_cast<double>(shape.hidden_size) * job.cost.activation_bytes;
  const double flop_s =
      6.0 * shape.hidden_size * shape.moe_intermediate_size / (job.cost.expert_tflops * 1e12);
  const double weight_s = 3.0 * shape.hidden_size * shape.moe_intermediate_size *
                          job.cost.weight_bytes / (job.cost.hbm_gbytes_per_s * 1e9);
  int64_t nvl_copies = 0;
  for (const StepCounters& c : steps) {
    double compute = 0;
    double step_max = 0, step_sum = 0;
    for (int r = 0; r < num_ranks; ++r) {
      double rank_s = 0, rank_tokens = 0;
      for (int e = 0; e < n; ++e) {
        const int32_t tokens = c.expert_tokens[static_cast<size_t>(r) * n + e];
        if (tokens > 0) rank_s += std::max(tokens * flop_s, weight_s);
        rank_tokens += tokens;
      }
      compute = std::max(compute, rank_s);
      step_max = std::max(step_max, rank_tokens);
      step_sum += rank_tokens;
    }
    int64_t ib_max = 0;
    for (int m = 0; m < topo.num_nodes; ++m)
      ib_max = std::max({ib_max, c.ib_send[m], c.ib_recv[m]});
    int64_t nvl_max = 0;
    for (int r = 0; r < num_ranks; ++r) {
      nvl_max = std::max({nvl_max, c.nvl_send[r], c.nvl_recv[r]});
      nvl_copies += c.nvl_recv[r];
    }
    const double ib = ib_max * token_bytes / (per_node * job.cost.ib_gbytes_per_s * 1e9);
    const double nvl = nvl_max * token_bytes / (job.cost.nvlink_gbytes_per_s * 1e9);
    eval.compute_us += compute * 1e6;
    eval.ib_us += 2 * ib * 1e6;
    eval.nvlink_us += 2 * nvl * 1e6;
    eval.step_max_over_mean += step_sum > 0 ? step_max / (step_sum / num_ranks) : 0;
  }
  const double num_steps = std::max<double>(1.0, static_cast<double>(steps.size()));
  eval.compute_us /= num_steps;
  eval.ib_us /= num_steps;
  eval.nvlink_us /= num_steps;
  eval.step_max_over_mean /= num_steps;
  eval.time_us = eval.compute_us + eval.ib_us + eval.nvlink_us;
  traffic.cross_bytes = static_cast<double>(traffic.machine_cross) * token_bytes;
  traffic.nvlink_bytes = static_cast<double>(nvl_copies) * token_bytes;
  eval.load = Stats(rank_load);
  return eval;
}

// "1-3, 5, 7-9"
std::string LayerRanges(const std::vector<LayerPlacement>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1].layer_id == layers[j].layer_id + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(layers[i].layer_id);
    if (j > i) {
      out += '-';  // appended separately: GCC 12 warns (-Wrestrict) on "-" + std::to_string
      out += std::to_string(layers[j].layer_id);
    }
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

Status CheckShape(const Placement& placement, const Trace& trace, int layer_id) {
  const ModelShape& shape = trace.shape();
  const std::string where = "layer " + std::to_string(layer_id) + ": ";
  if (shape.num_experts != placement.model.num_experts) {
    return Status::InvalidArgument(
        where + "placed for " + std::to_string(placement.model.num_experts) +
        " routed experts (model.num_experts), the trace has " + std::to_string(shape.num_experts));
  }
  if (shape.top_k != placement.model.top_k) {
    return Status::InvalidArgument(where + "placed for top-k " +
                                   std::to_string(placement.model.top_k) +
                                   " (model.top_k), the trace routes each token to " +
                                   std::to_string(shape.top_k) + " experts");
  }
  return Status::Ok();
}

}  // namespace

Status CheckPlacementFitsTrace(const Placement& placement, const Trace& trace) {
  if (trace.num_layers() == 0) return Status::InvalidArgument("the trace records no MoE layer");
  RETURN_IF_ERROR(CheckShape(placement, trace, trace.layer_ids()[0]));
  for (int id : trace.layer_ids()) {
    if (placement.LayerIndex(id) < 0) {
      return Status::InvalidArgument("layer " + std::to_string(id) +
                                     " of the trace is not in the placement (it places layers " +
                                     LayerRanges(placement.layers) + ")");
    }
  }
  return Status::Ok();
}

Status CostModel::Validate() const {
  if (!(expert_tflops > 0) || !(hbm_gbytes_per_s > 0) || !(ib_gbytes_per_s > 0) ||
      !(nvlink_gbytes_per_s > 0) || activation_bytes < 1 || weight_bytes < 1) {
    return Status::InvalidArgument("cost model constants must be positive");
  }
  return Status::Ok();
}

void TrafficCounts::Add(const TrafficCounts& o) {
  rank_local += o.rank_local;
  rank_intra += o.rank_intra;
  rank_cross += o.rank_cross;
  machine_local += o.machine_local;
  machine_cross += o.machine_cross;
  cross_bytes += o.cross_bytes;
  nvlink_bytes += o.nvlink_bytes;
}

StatusOr<Evaluation> Evaluate(const Placement& placement, const Trace& trace,
                              const EvaluateOptions& options) {
  RETURN_IF_ERROR(options.cost.Validate());
  if (options.step_tokens_per_rank < 1) {
    return Status::InvalidArgument("step tokens per rank must be >= 1");
  }
  if (options.num_threads < 1 || options.num_threads > 1024) {
    return Status::InvalidArgument("threads must be in [1, 1024]");
  }
  const ModelShape& shape = trace.shape();
  if (trace.num_layers() > 0) RETURN_IF_ERROR(CheckShape(placement, trace, trace.layer_ids()[0]));
  if (shape.hidden_size < 1 || shape.moe_intermediate_size < 1) {
    return Status::InvalidArgument(
        "the trace does not give hidden_size and "
        "moe_intermediate_size, which the cost model needs");
  }
  if (trace.num_tokens() == 0) return Status::InvalidArgument("the evaluation trace is empty");
  ASSIGN_OR_RETURN(Router router,
                   Router::Create(placement, options.routing.value_or(placement.routing)));
  const TokenSchedule schedule = Schedule(trace, placement.topology.num_ranks(),
                                          options.step_tokens_per_rank, options.deal_seed);

  std::vector<std::pair<int, int>> shared;  // (trace layer, placement layer)
  for (int l = 0; l < trace.num_layers(); ++l) {
    const int pl = placement.LayerIndex(trace.layer_ids()[l]);
    if (pl >= 0) shared.emplace_back(l, pl);
  }
  if (shared.empty()) {
    return Status::InvalidArgument("the placement and the trace share no layer");
  }
  Evaluation result;
  result.layers.resize(shared.size());
  result.num_tokens = trace.num_tokens();
  result.num_steps = schedule.num_steps;
  auto run = [&](size_t i) {
    const auto [tl, pl] = shared[i];
    result.layers[i] = EvaluateLayer(LayerJob{trace, router, schedule, options.cost, tl, pl});
    result.layers[i].layer_id = trace.layer_ids()[tl];
    result.layers[i].extra_copies = placement.layers[pl].NumExtraCopies();
  };
  const int total = static_cast<int>(shared.size());
  if (options.num_threads == 1) {
    for (int i = 0; i < total; ++i) {
      run(i);
      if (options.progress) options.progress(i + 1, total);
    }
  } else {
    std::atomic<int> done{0};
    ThreadPool pool(options.num_threads);
    pool.ParallelFor(shared.size(), 1, [&](size_t begin, size_t end, int thread_idx) {
      for (size_t i = begin; i < end; ++i) {
        run(i);
        const int finished = ++done;
        if (thread_idx == 0 && options.progress) options.progress(finished, total);
      }
    });
    if (options.progress) options.progress(total, total);
  }

  LayerEvaluation& sum = result.total;
  const double num_layers = static_cast<double>(result.layers.size());
  for (const LayerEvaluation& l : result.layers) {
    sum.traffic.Add(l.traffic);
    sum.extra_copies += l.extra_copies;
    sum.load.max += l.load.max / num_layers;
    sum.load.mean += l.load.mean / num_layers;
    sum.load.stddev += l.load.stddev / num_layers;
    sum.load.idle_fraction += l.load.idle_fraction / num_layers;
    sum.time_us += l.time_us / num_layers;
    sum.compute_us += l.compute_us / num_layers;
    sum.ib_us += l.ib_us / num_layers;
    sum.nvlink_us += l.nvlink_us / num_layers;
    sum.step_max_over_mean += l.step_max_over_mean / num_layers;
  }
  return result;
}

}  // namespace epserve::placement
