#include "placement/rebalance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/check.h"

namespace epserve::placement {
namespace {

// Adds `sign` times the pairs expert `copies` is predicted to bring to each rank. O(copies^2),
// no allocation: it runs once per candidate move.
// `remote`, when not null, is the expert's row of PredictRemoteArrivals (machine_load.h): what
// each machine receives from the others, replacing the per-expert estimate below.
void AddExpertShares(const std::vector<ExpertCopy>& copies, double load, const Topology& topology,
                     RoutingPolicy policy, const double* remote, double sign, double* rank_load) {
  double total_w = 0;
  for (const ExpertCopy& c : copies) total_w += c.weight;
  if (policy == RoutingPolicy::kWeighted || copies.size() == 1) {
    for (const ExpertCopy& c : copies) rank_load[c.rank] += sign * load * c.weight / total_w;
    return;
  }
  const double per_source = load / topology.num_ranks();
  const int per_node = topology.ranks_per_node;
  // Sources on machines without a copy go to the weighted choice among all copies.
  int nodes_with_copy = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    const int node = topology.NodeOf(copies[i].rank);
    bool first = true;
    for (size_t j = 0; j < i && first; ++j) first = topology.NodeOf(copies[j].rank) != node;
    nodes_with_copy += first ? 1 : 0;
  }
  const double elsewhere =
      per_source * per_node * static_cast<double>(topology.num_nodes - nodes_with_copy);
  for (const ExpertCopy& c : copies) {
    const int node = topology.NodeOf(c.rank);
    int holders = 0;
    double node_w = 0;
    for (const ExpertCopy& o : copies) {
      if (topology.NodeOf(o.rank) == node) {
        ++holders;
        node_w += o.weight;
      }
    }
    // Its own rank's share, its weight's part of the machine's ranks without a copy, and its
    // weight's part of the machines without one.
    const double own_machine = per_source * (per_node - holders) * c.weight / node_w;
    const double arriving =
        remote ? remote[node] * c.weight / node_w : elsewhere * c.weight / total_w;
    rank_load[c.rank] += sign * (per_source + own_machine + arriving);
  }
}

const double* RemoteRow(const std::vector<double>* remote, size_t e, const Topology& topology) {
  return remote ? remote->data() + e * topology.num_nodes : nullptr;
}

bool Holds(const std::vector<int>& slots, int expert) {
  return std::find(slots.begin(), slots.end(), expert) != slots.end();
}

struct MachineScore {
  double max = 0;
  double sum_sq = 0;
};

MachineScore Score(const std::vector<double>& load, int first, int count) {
  MachineScore s;
  for (int r = first; r < first + count; ++r) {
    s.max = std::max(s.max, load[r]);
    s.sum_sq += load[r] * load[r];
  }
  return s;
}

// One candidate: move expert `e` from `from` to `to`, and with `f >= 0` expert f back.
struct Action {
  int e = -1;
  int f = -1;
  int from = -1;
  int to = -1;
};

void SetRank(std::vector<ExpertCopy>* copies, int from, int to) {
  for (ExpertCopy& c : *copies) {
    if (c.rank == from) {
      c.rank = to;
      return;
    }
  }
  CHECK(false);
}

}  // namespace

std::vector<double> PredictRankLoads(const LayerPlacement& layer,
                                     const std::vector<double>& expert_load,
                                     const Topology& topology, RoutingPolicy policy,
                                     const std::vector<double>* remote) {
  std::vector<double> load(topology.num_ranks(), 0.0);
  for (size_t e = 0; e < layer.copies.size(); ++e) {
    AddExpertShares(layer.copies[e], expert_load[e], topology, policy,
                    RemoteRow(remote, e, topology), 1.0, load.data());
  }
  return load;
}

RebalanceReport RebalanceRanks(LayerPlacement* layer, const std::vector<double>& expert_load,
                               const Topology& topology, RoutingPolicy policy,
                               const std::vector<double>* remote) {
  RebalanceReport report;
  std::vector<double> load = PredictRankLoads(*layer, expert_load, topology, policy, remote);
  const double total = std::accumulate(load.begin(), load.end(), 0.0);
  const double mean = total / topology.num_ranks();
  report.max_over_mean_before = mean > 0 ? *std::max_element(load.begin(), load.end()) / mean : 0.0;
  report.max_over_mean_after = report.max_over_mean_before;
  const int per_node = topology.ranks_per_node;
  if (!(mean > 0) || per_node < 2) return report;
  // Improvements smaller than this are rounding, not progress.
  const double eps = 1e-9 * total;
  std::vector<double> trial(load.size());

  for (int m = 0; m < topology.num_nodes; ++m) {
    const int first = m * per_node;
    size_t lo = layer->slots[first].size(), hi = lo;
    size_t machine_slots = 0;
    for (int r = first; r < first + per_node; ++r) {
      lo = std::min(lo, layer->slots[r].size());
      hi = std::max(hi, layer->slots[r].size());
      machine_slots += layer->slots[r].size();
    }
    // Every accepted step strictly lowers (max, sum of squares), so the descent ends; the cap
    // only bounds the time on pathological inputs.
    const size_t max_steps = 64 * machine_slots + 64;
    for (size_t step = 0; step < max_steps; ++step) {
      int h = first;
      for (int r = first + 1; r < first + per_node; ++r) {
        if (load[r] > load[h]) h = r;
      }
      const MachineScore now = Score(load, first, per_node);
      MachineScore best = now;
      Action best_action;
      auto consider = [&](const Action& a) {
        // Only this machine's ranks change (the other ranks' entries of `trial` get equal and
        // opposite shares), and only they are scored, so only they are copied.
        std::copy(load.begin() + first, load.begin() + first + per_node, trial.begin() + first);
        std::vector<ExpertCopy>& ce = layer->copies[a.e];
        const double* re = RemoteRow(remote, a.e, topology);
        AddExpertShares(ce, expert_load[a.e], topology, policy, re, -1.0, trial.data());
        SetRank(&ce, a.from, a.to);
        AddExpertShares(ce, expert_load[a.e], topology, policy, re, 1.0, trial.data());
        SetRank(&ce, a.to, a.from);
        if (a.f >= 0) {
          std::vector<ExpertCopy>& cf = layer->copies[a.f];
          const double* rf = RemoteRow(remote, a.f, topology);
          AddExpertShares(cf, expert_load[a.f], topology, policy, rf, -1.0, trial.data());
          SetRank(&cf, a.to, a.from);
          AddExpertShares(cf, expert_load[a.f], topology, policy, rf, 1.0, trial.data());
          SetRank(&cf, a.from, a.to);
        }
        const MachineScore s = Score(trial, first, per_node);
        const bool better = s.max < best.max - eps ||
                            (s.max <= best.max + eps && s.sum_sq < best.sum_sq - eps * mean);
        if (better) {
          best = s;
          best_action = a;
        }
      };
      for (int e : layer->slots[h]) {
        for (int t = first; t < first + per_node; ++t) {
          if (t == h || Holds(layer->slots[t], e)) continue;
          if (layer->slots[h].size() > lo && layer->slots[t].size() < hi) {
            consider(Action{.e = e, .f = -1, .from = h, .to = t});
          }
          for (int f : layer->slots[t]) {
            if (!Holds(layer->slots[h], f)) consider(Action{.e = e, .f = f, .from = h, .to = t});
          }
        }
      }
      if (best_action.e < 0) break;
      const Action& a = best_action;
      // Apply: e from `from` to `to` (and f back), keeping slot order otherwise.
      std::vector<int>& from_slots = layer->slots[a.from];
      std::vector<int>& to_slots = layer->slots[a.to];
      auto it = std::find(from_slots.begin(), from_slots.end(), a.e);
      if (a.f >= 0) {
        *it = a.f;
        *std::find(to_slots.begin(), to_slots.end(), a.f) = a.e;
        SetRank(&layer->copies[a.f], a.to, a.from);
        ++report.swaps;
      } else {
        from_slots.erase(it);
        to_slots.push_back(a.e);
        ++report.moves;
      }
      SetRank(&layer->copies[a.e], a.from, a.to);
      // Recompute rather than accumulate, so rounding does not drift.
      load = PredictRankLoads(*layer, expert_load, topology, policy, remote);
    }
  }
  report.max_over_mean_after = *std::max_element(load.begin(), load.end()) / mean;
  return report;
}

}  // namespace epserve::placement
