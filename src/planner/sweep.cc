#include "planner/sweep.h"

#include <algorithm>
#include <map>

namespace epserve::planner {

std::vector<int> AllBatches(int max_batch) {
  std::vector<int> batches;
  for (int b = 1; b <= max_batch; ++b) batches.push_back(b);
  return batches;
}

StatusOr<std::vector<int>> ParseIntRanges(const std::string& text, const std::string& what) {
  std::vector<int> values;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    try {
      const size_t dash = item.find('-', 1);
      size_t used = 0;
      if (dash == std::string::npos) {
        values.push_back(std::stoi(item, &used));
        if (used != item.size()) throw std::invalid_argument(item);
      } else {
        const int lo = std::stoi(item.substr(0, dash));
        const int hi = std::stoi(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1 || hi < lo || hi - lo > 100000) {
          throw std::invalid_argument(item);
        }
        for (int v = lo; v <= hi; ++v) values.push_back(v);
      }
    } catch (...) {
      return Status::InvalidArgument(what + ": '" + item + "' is not an integer or A-B range");
    }
    start = end + 1;
  }
  for (int v : values) {
    if (v <= 0) return Status::InvalidArgument(what + ": values must be positive");
  }
  return values;
}

StatusOr<SweepResult> RunSweep(const SweepInputs& in, const SweepOptions& options) {
  if (in.hw == nullptr || in.model == nullptr || in.eff == nullptr) {
    return Status::InvalidArgument("sweep: hardware, model and efficiency are required");
  }
  SweepResult result;
  int swept = 0;
  Status first_error = Status::Ok();
  for (int ep : options.ep_values) {
    const HardwareSpec* hw = in.hw;
    const int gpm_default =
        options.gpus_per_machine > 0 ? options.gpus_per_machine : in.hw->gpus_per_machine;
    if (in.single_machine_hw != nullptr && ep <= in.single_machine_hw->gpus_per_machine) {
      hw = in.single_machine_hw;
    }
    const int gpm =
        hw == in.hw ? gpm_default : std::min(gpm_default, in.single_machine_hw->gpus_per_machine);
    const int ranks_per_machine = std::min(ep, gpm);
    for (int redundant : options.redundant_values) {
      Status slots = CheckExpertSlots(*in.model, ep, redundant);
      if (!slots.ok()) {
        if (first_error.ok()) first_error = slots;
        result.skipped.push_back(slots.message());
        continue;
      }
      ++swept;
      ASSIGN_OR_RETURN(RoutingModel routing,
                       RoutingModel::Create(*in.model, {.ep = ep,
                                                        .ranks_per_machine = ranks_per_machine,
                                                        .redundant_experts = redundant,
                                                        .trace = in.trace,
                                                        .placement = in.placement}));
      const PlanContext ctx{.hw = hw, .model = in.model, .eff = in.eff, .routing = &routing};
      for (int tp : options.tp_values) {
        StatusOr<Deployment> deployment = MakeDeployment(
            *in.model,
            {.ep = ep, .tp = tp, .gpus_per_machine = gpm, .redundant_experts = redundant});
        if (!deployment.ok()) {
          result.skipped.push_back(deployment.status().message());
          continue;
        }
        for (int batch : options.batches) {
          Workload w = options.workload;
          w.batch = batch;
          StatusOr<StepEstimate> est = EstimateStep(
              ctx, *deployment, w, {.overlap = options.overlap, .require_memory_fit = true});
          if (!est.ok()) {
            result.skipped.push_back(est.status().message());
            continue;
          }
          result.points.push_back(
              {.gpu = hw->name, .deployment = *deployment, .batch = batch, .estimate = *est});
        }
      }
    }
  }
  if (swept == 0)
    return first_error.ok() ? Status::InvalidArgument("sweep: no EP values") : first_error;
  // Mark each EP's frontier.
  std::map<std::pair<int, int>, std::vector<size_t>> by_ep;
  for (size_t i = 0; i < result.points.size(); ++i) {
    const Deployment& d = result.points[i].deployment;
    by_ep[{d.ep, d.redundant_experts}].push_back(i);
  }
  for (auto& [key, indices] : by_ep) {
    std::sort(indices.begin(), indices.end(), [&](size_t a, size_t b) {
      const StepEstimate& x = result.points[a].estimate;
      const StepEstimate& y = result.points[b].estimate;
      if (x.speed != y.speed) return x.speed > y.speed;
      return x.throughput_per_machine > y.throughput_per_machine;
    });
    double best = -1;
    for (size_t i : indices) {
      if (result.points[i].estimate.throughput_per_machine > best) {
        best = result.points[i].estimate.throughput_per_machine;
        result.points[i].on_frontier = true;
      }
    }
  }
  return result;
}

std::vector<SweepPoint> ParetoFrontier(const std::vector<SweepPoint>& points) {
  std::vector<SweepPoint> sorted = points;
  std::sort(sorted.begin(), sorted.end(), [](const SweepPoint& a, const SweepPoint& b) {
    if (a.estimate.speed != b.estimate.speed) return a.estimate.speed > b.estimate.speed;
    return a.estimate.throughput_per_machine > b.estimate.throughput_per_machine;
  });
  std::vector<SweepPoint> frontier;
  double best = -1;
  for (const SweepPoint& p : sorted) {
    if (p.estimate.throughput_per_machine > best) {
      best = p.estimate.throughput_per_machine;
      frontier.push_back(p);
    }
  }
  return frontier;
}

double ThroughputAtSpeed(const std::vector<SweepPoint>& points, double min_speed) {
  double best = 0;
  for (const SweepPoint& p : points) {
    if (p.estimate.speed >= min_speed) best = std::max(best, p.estimate.throughput_per_machine);
  }
  return best;
}

std::vector<SweepPoint> PointsWithEp(const SweepResult& result, int ep) {
  std::vector<SweepPoint> out;
  for (const SweepPoint& p : result.points) {
    if (p.deployment.ep == ep) out.push_back(p);
  }
  return out;
}

PickResult PickDeployment(const SweepResult& result, double min_speed) {
  PickResult pick;
  pick.min_speed = min_speed;
  std::map<std::pair<int, int>, SweepPoint> per_ep;  // by (EP, redundant experts)
  for (const SweepPoint& p : result.points) {
    if (p.estimate.speed < min_speed) continue;
    const double thr = p.estimate.throughput_per_machine;
    if (!pick.found) {
      pick.found = true;
      pick.cheapest = p;
      pick.best_throughput = p;
    } else {
      const int gpus = p.deployment.ep;
      const int cheapest_gpus = pick.cheapest.deployment.ep;
      if (gpus < cheapest_gpus ||
          (gpus == cheapest_gpus && thr > pick.cheapest.estimate.throughput_per_machine)) {
        pick.cheapest = p;
      }
      if (thr > pick.best_throughput.estimate.throughput_per_machine) pick.best_throughput = p;
    }
    const std::pair<int, int> key{p.deployment.ep, p.deployment.redundant_experts};
    auto it = per_ep.find(key);
    if (it == per_ep.end() || thr > it->second.estimate.throughput_per_machine) {
      per_ep[key] = p;
    }
  }
  for (auto& [key, p] : per_ep) pick.best_per_ep.push_back(p);
  return pick;
}

}  // namespace epserve::planner
