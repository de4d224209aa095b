#include "placement/compare.h"

#include <algorithm>
#include <sstream>

namespace epserve::placement {

StatusOr<VariantSpec> ParseVariant(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream in(name);
  for (std::string part; std::getline(in, part, '+');) parts.push_back(part);
  if (parts.empty()) return Status::InvalidArgument("empty strategy variant");
  VariantSpec spec{.label = name, .place = {}};
  ASSIGN_OR_RETURN(spec.place.strategy, ParseStrategy(parts[0]));
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& s = parts[i];
    const Strategy strategy = spec.place.strategy;
    if (s == "topo" || s == "wrr") {
      if (strategy == Strategy::kContiguous) {
        return Status::InvalidArgument(name +
                                       ": contiguous has one copy per expert; nothing to "
                                       "route");
      }
      spec.place.routing = s == "topo" ? RoutingPolicy::kTopology : RoutingPolicy::kWeighted;
    } else if (strategy == Strategy::kEplb && s == "hierarchical") {
      spec.place.eplb.mode = EplbMode::kHierarchical;
    } else if (strategy == Strategy::kEplb && s == "global") {
      spec.place.eplb.mode = EplbMode::kGlobal;
    } else if (strategy == Strategy::kGrace && s == "norep") {
      spec.place.grace.replication = false;
    } else if (strategy == Strategy::kGrace && s == "nomrep") {
      spec.place.grace.machine_replication = false;
    } else if (strategy == Strategy::kGrace && s == "norebal") {
      spec.place.grace.rank_rebalance = false;
    } else if (strategy == Strategy::kGrace && (s == "metis" || s == "spectral")) {
      spec.place.grace.grouping = s == "metis" ? Grouping::kMinCut : Grouping::kSpectral;
      spec.grouping_set = true;
    } else if (strategy == Strategy::kGrace && s == "affranks") {
      spec.place.grace.rank_grouping = RankGrouping::kAffinity;
    } else if (strategy == Strategy::kGrace && s == "asis") {
      spec.place.selection = Selection::kAsPlaced;
    } else if (strategy == Strategy::kGrace && s == "mknee") {
      spec.place.grace.machine_grouping = MachineGrouping::kControlled;
    } else {
      return Status::InvalidArgument(name + ": unknown switch \"" + s + "\" for " + parts[0]);
    }
  }
  return spec;
}

std::vector<std::string> AllVariants() {
  // "grace" (the chosen placement) comes first among the replicating grace variants, so eplb
  // is matched to its copies. The "+asis" rows are the steps of each grouping on their own.
  return {"contiguous",
          "eplb+hierarchical",
          "eplb+global",
          "eplb+global+topo",
          "grace",
          "grace+metis+asis",
          "grace+metis+norep+asis",
          "grace+metis+norebal+asis",
          "grace+metis+affranks+asis",
          "grace+spectral+asis",
          "grace+spectral+norep+asis",
          "grace+spectral+nomrep+asis",
          "grace+spectral+norebal+asis"};
}

StatusOr<std::vector<CompareRow>> Compare(const Trace& profile, const Trace& holdout,
                                          const CompareOptions& options) {
  if (options.variants.empty()) return Status::InvalidArgument("no strategies to compare");
  std::vector<VariantSpec> specs;
  for (const std::string& name : options.variants) {
    ASSIGN_OR_RETURN(VariantSpec spec, ParseVariant(name));
    const PlaceOptions parsed = spec.place;
    spec.place.topology = options.topology;
    spec.place.num_threads = options.num_threads;
    spec.place.grace = options.grace;
    spec.place.grace.replication = parsed.grace.replication && options.grace.replication;
    spec.place.grace.machine_replication =
        parsed.grace.machine_replication && options.grace.machine_replication;
    spec.place.grace.rank_rebalance = parsed.grace.rank_rebalance && options.grace.rank_rebalance;
    if (spec.grouping_set) spec.place.grace.grouping = parsed.grace.grouping;
    if (parsed.grace.rank_grouping == RankGrouping::kAffinity) {
      spec.place.grace.rank_grouping = RankGrouping::kAffinity;
    }
    spec.place.selection = parsed.selection;
    spec.place.selection_deals = options.selection_deals;
    spec.place.cost = options.evaluate.cost;
    spec.place.step_tokens_per_rank = options.evaluate.step_tokens_per_rank;
    if (parsed.grace.machine_grouping != MachineGrouping::kNonUniform) {
      spec.place.grace.machine_grouping = parsed.grace.machine_grouping;
    }
    spec.place.eplb = options.eplb;
    if (parsed.eplb.mode != EplbMode::kAuto) spec.place.eplb.mode = parsed.eplb.mode;
    if (options.redundant >= 0) spec.place.SetCopyBudget(options.redundant);
    specs.push_back(std::move(spec));
  }
  // Grace variants with replication go first so that eplb can match their copies.
  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto replicating_grace = [&](size_t i) {
    return specs[i].place.strategy == Strategy::kGrace && specs[i].place.grace.replication;
  };
  std::stable_partition(order.begin(), order.end(), replicating_grace);

  std::vector<CompareRow> rows(specs.size());
  std::vector<int> matched_copies;  // per layer, from the first replicating grace variant
  for (size_t i : order) {
    VariantSpec& spec = specs[i];
    if (spec.place.strategy == Strategy::kEplb && options.redundant < 0) {
      spec.place.redundant_per_layer = matched_copies;
    }
    if (options.progress) {
      spec.place.progress = [&, label = spec.label](int done, int total) {
        options.progress("placing " + label, done, total);
      };
    }
    StatusOr<PlaceResult> placed = Place(profile, spec.place);
    if (!placed.ok()) return placed.status().WithContext(spec.label);
    if (replicating_grace(i) && matched_copies.empty()) {
      for (const LayerPlacement& layer : placed->placement.layers) {
        matched_copies.push_back(layer.NumExtraCopies());
      }
    }
    EvaluateOptions eval = options.evaluate;
    eval.num_threads = options.num_threads;
    if (options.progress) {
      eval.progress = [&, label = spec.label](int done, int total) {
        options.progress("evaluating " + label, done, total);
      };
    }
    StatusOr<Evaluation> evaluation = Evaluate(placed->placement, holdout, eval);
    if (!evaluation.ok()) return evaluation.status().WithContext(spec.label);
    rows[i] = CompareRow{.label = spec.label,
                         .placement = std::move(placed->placement),
                         .evaluation = std::move(*evaluation)};
  }
  return rows;
}

}  // namespace epserve::placement
