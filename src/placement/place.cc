#include "placement/place.h"

#include <atomic>
#include <string>

#include "base/thread_pool.h"
#include "placement/affinity.h"
#include "placement/grace_mincut.h"
#include "placement/token_sets.h"

namespace epserve::placement {

std::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kContiguous:
      return "contiguous";
    case Strategy::kEplb:
      return "eplb";
    case Strategy::kGrace:
      return "grace";
  }
  return "?";
}

StatusOr<Strategy> ParseStrategy(std::string_view name) {
  if (name == "contiguous") return Strategy::kContiguous;
  if (name == "eplb") return Strategy::kEplb;
  if (name == "grace") return Strategy::kGrace;
  return Status::InvalidArgument("unknown strategy \"" + std::string(name) +
                                 "\" (expected contiguous, eplb or grace)");
}

void PlaceOptions::SetCopyBudget(int slots) {
  redundant = slots;
  grace.max_extra_copies = slots;
  if (slots == 0) grace.replication = false;
}

Status PlaceOptions::Validate(const Trace& trace) const {
  RETURN_IF_ERROR(topology.Validate());
  if (trace.shape().num_experts < topology.num_ranks()) {
    return Status::InvalidArgument(std::to_string(trace.shape().num_experts) +
                                   " experts cannot cover " + std::to_string(topology.num_ranks()) +
                                   " ranks");
  }
  // Bounds that keep a typo from allocating without end.
  const int max_redundant = 16 * trace.shape().num_experts;
  if (redundant < 0 || redundant > max_redundant) {
    return Status::InvalidArgument("redundant copies must be in [0, " +
                                   std::to_string(max_redundant) + "]");
  }
  for (int r : redundant_per_layer) {
    if (r < 0 || r > max_redundant) {
      return Status::InvalidArgument("redundant copies per layer must be in [0, " +
                                     std::to_string(max_redundant) + "]");
    }
  }
  if (!redundant_per_layer.empty() &&
      static_cast<int>(redundant_per_layer.size()) != trace.num_layers()) {
    return Status::InvalidArgument("redundant copies given for " +
                                   std::to_string(redundant_per_layer.size()) +
                                   " layers, trace has " + std::to_string(trace.num_layers()));
  }
  if (grace.fixed_r > 100) {
    return Status::InvalidArgument("r must be in [0, 100]");
  }
  if (grace.max_extra_copies < 0) {
    return Status::InvalidArgument("extra copy cap must not be negative");
  }
  if (selection_deals < 1 || selection_deals > 1000) {
    return Status::InvalidArgument("selection deals must be in [1, 1000]");
  }
  if (num_threads < 1 || num_threads > 1024) {
    return Status::InvalidArgument("threads must be in [1, 1024]");
  }
  if (trace.num_tokens() == 0) return Status::InvalidArgument("the profiling trace is empty");
  return Status::Ok();
}

LayerPlacement PlaceContiguousLayer(int layer_id, int num_experts, int num_ranks) {
  std::vector<std::vector<int>> slots(num_ranks);
  int e = 0;
  for (int r = 0; r < num_ranks; ++r) {
    const int count = num_experts / num_ranks + (r < num_experts % num_ranks ? 1 : 0);
    for (int i = 0; i < count; ++i) slots[r].push_back(e++);
  }
  return LayerFromSlots(layer_id, num_experts, std::move(slots));
}

namespace {

StatusOr<PlaceResult> PlaceAsIs(const Trace& profile, const PlaceOptions& options) {
  const int num_layers = profile.num_layers();
  PlaceResult result;
  Placement& p = result.placement;
  p.strategy = std::string(StrategyName(options.strategy));
  p.routing = options.routing.value_or(
      options.strategy == Strategy::kGrace ? RoutingPolicy::kTopology : RoutingPolicy::kWeighted);
  p.topology = options.topology;
  p.model = profile.shape();
  p.layers.resize(num_layers);
  result.expert_load.resize(num_layers);
  if (options.strategy == Strategy::kGrace) result.grace_reports.resize(num_layers);
  result.fewer_copies.assign(options.grace.copy_variants, std::vector<LayerPlacement>(num_layers));
  if (options.strategy == Strategy::kEplb) {
    RETURN_IF_ERROR(ResolveEplb(options.topology, profile.shape(), options.eplb).status());
  }

  std::vector<Status> status(num_layers);
  auto place_layer = [&](int l) -> Status {
    LayerProfile prof = ProfileLayer(profile, l);
    result.expert_load[l] = prof.load;
    switch (options.strategy) {
      case Strategy::kContiguous:
        p.layers[l] =
            PlaceContiguousLayer(prof.layer_id, prof.num_experts, options.topology.num_ranks());
        return Status::Ok();
      case Strategy::kEplb: {
        const int redundant = options.redundant_per_layer.empty() ? options.redundant
                                                                  : options.redundant_per_layer[l];
        EplbOptions eplb = options.eplb;
        eplb.num_redundant = redundant;
        ASSIGN_OR_RETURN(p.layers[l],
                         PlaceEplbLayer(prof, options.topology, profile.shape(), eplb));
        return Status::Ok();
      }
      case Strategy::kGrace: {
        GraceOptions grace = options.grace;
        grace.routing = p.routing;
        GraceLayerResult r;
        if (grace.grouping == Grouping::kMinCut) {
          ASSIGN_OR_RETURN(r, PlaceGraceMinCutLayer(prof, TokenSets::FromTrace(profile, l),
                                                    options.topology, grace));
        } else {
          ASSIGN_OR_RETURN(r, PlaceGraceLayer(prof, options.topology, grace));
        }
        p.layers[l] = std::move(r.layer);
        result.grace_reports[l] = std::move(r.report);
        for (size_t i = 0; i < r.fewer_copies.size(); ++i) {
          result.fewer_copies[i][l] = std::move(r.fewer_copies[i]);
        }
        return Status::Ok();
      }
    }
    return Status::Internal("unknown strategy");
  };

  std::atomic<int> done{0};
  if (options.num_threads == 1) {
    for (int l = 0; l < num_layers; ++l) {
      status[l] = place_layer(l);
      if (!status[l].ok()) break;
      if (options.progress) options.progress(l + 1, num_layers);
    }
  } else {
    ThreadPool pool(options.num_threads);
    pool.ParallelFor(num_layers, 1, [&](size_t begin, size_t end, int thread_idx) {
      for (size_t l = begin; l < end; ++l) {
        status[l] = place_layer(static_cast<int>(l));
        const int finished = ++done;
        if (thread_idx == 0 && options.progress) options.progress(finished, num_layers);
      }
    });
    if (options.progress) options.progress(num_layers, num_layers);
  }
  for (int l = 0; l < num_layers; ++l) {
    RETURN_IF_ERROR(status[l].WithContext("layer " + std::to_string(profile.layer_ids()[l])));
  }
  RETURN_IF_ERROR(ValidatePlacement(p));
  return result;
}

}  // namespace

StatusOr<PlaceResult> Place(const Trace& profile, const PlaceOptions& options) {
  RETURN_IF_ERROR(options.Validate(profile));
  if (options.strategy != Strategy::kGrace || options.selection == Selection::kAsPlaced) {
    return PlaceAsIs(profile, options);
  }
  const bool mincut = options.grace.grouping == Grouping::kMinCut;
  PlaceOptions primary = options;
  primary.grace.copy_variants = mincut && options.grace.replication ? 2 : 0;
  ASSIGN_OR_RETURN(PlaceResult result, PlaceAsIs(profile, primary));
  Placement& chosen = result.placement;
  // The rivals, each placed as-is with the same routing; eplb with grace's copies per layer.
  std::vector<std::pair<std::string, PlaceOptions>> rivals;
  PlaceOptions eplb = options;
  eplb.progress = nullptr;
  eplb.strategy = Strategy::kEplb;
  eplb.routing = chosen.routing;
  eplb.redundant_per_layer.clear();
  for (const LayerPlacement& layer : chosen.layers) {
    eplb.redundant_per_layer.push_back(layer.NumExtraCopies());
  }
  rivals.emplace_back("eplb", eplb);
  PlaceOptions contiguous = options;
  contiguous.progress = nullptr;
  contiguous.strategy = Strategy::kContiguous;
  contiguous.routing = chosen.routing;
  rivals.emplace_back("contiguous", contiguous);

  std::vector<Placement> candidates;
  candidates.push_back(chosen);
  ChoiceReport& report = result.choice;
  report.candidates.push_back(mincut ? "grace+metis" : "grace+spectral");
  for (size_t i = 0; i < result.fewer_copies.size(); ++i) {
    // Copies cost expert work on their ranks; where they save less traffic than that, fewer.
    candidates.push_back(chosen);
    candidates.back().layers = std::move(result.fewer_copies[i]);
    report.candidates.push_back(i == 0 ? "grace+metis+norep"
                                       : "grace+metis+" + std::to_string(i) + "/" +
                                             std::to_string(result.fewer_copies.size()) + "copies");
  }
  result.fewer_copies.clear();
  for (auto& [name, rival_options] : rivals) {
    ASSIGN_OR_RETURN(PlaceResult rival, PlaceAsIs(profile, rival_options));
    candidates.push_back(std::move(rival.placement));
    report.candidates.push_back(name);
  }
  const int num_layers = static_cast<int>(chosen.layers.size());
  report.time_us.assign(candidates.size(), std::vector<double>(num_layers, 0.0));
  // One deal of the profile's prompts to the ranks makes a noisy per-layer time (the slowest
  // rank of a handful of steps); the mean over several deals is what a layer costs whichever
  // prompts land where.
  for (int d = 0; d < options.selection_deals; ++d) {
    const EvaluateOptions eval{.cost = options.cost,
                               .step_tokens_per_rank = options.step_tokens_per_rank,
                               .routing = chosen.routing,
                               .num_threads = options.num_threads,
                               .deal_seed = static_cast<uint64_t>(d)};
    for (size_t c = 0; c < candidates.size(); ++c) {
      ASSIGN_OR_RETURN(Evaluation ev, Evaluate(candidates[c], profile, eval));
      for (const LayerEvaluation& le : ev.layers) {
        const int l = chosen.LayerIndex(le.layer_id);
        if (l >= 0) report.time_us[c][l] += le.time_us / options.selection_deals;
      }
    }
  }
  report.chosen.assign(num_layers, 0);
  for (int l = 0; l < num_layers; ++l) {
    for (size_t c = 1; c < candidates.size(); ++c) {
      if (report.time_us[c][l] < report.time_us[report.chosen[l]][l]) report.chosen[l] = c;
    }
    if (report.chosen[l] != 0) chosen.layers[l] = candidates[report.chosen[l]].layers[l];
  }
  RETURN_IF_ERROR(ValidatePlacement(chosen));
  return result;
}

}  // namespace epserve::placement
