#include "placement/frontier.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace epserve::placement {

std::vector<std::string> FrontierVariants() {
  return {"contiguous", "eplb+hierarchical", "eplb+global", "eplb+global+topo", "grace"};
}

StatusOr<BudgetOutcome> SummarizeBudget(const std::vector<CompareRow>& rows, int redundant_slots) {
  BudgetOutcome out{.redundant_slots = redundant_slots};
  const CompareRow* grace = nullptr;
  const CompareRow* best_eplb = nullptr;
  const CompareRow* fastest = nullptr;
  for (const CompareRow& row : rows) {
    const LayerEvaluation& t = row.evaluation.total;
    if (row.label == "grace") {
      grace = &row;
      continue;
    }
    const bool eplb = row.label.rfind("eplb", 0) == 0;
    if (!eplb && row.label != "contiguous") continue;
    if (fastest == nullptr || t.time_us < fastest->evaluation.total.time_us) fastest = &row;
    if (eplb && (best_eplb == nullptr ||
                 t.traffic.machine_cross < best_eplb->evaluation.total.traffic.machine_cross)) {
      best_eplb = &row;
    }
  }
  if (grace == nullptr || best_eplb == nullptr) {
    return Status::InvalidArgument("a budget's comparison needs a \"grace\" row and an eplb row");
  }
  const LayerEvaluation& g = grace->evaluation.total;
  out.grace_extra_copies = g.extra_copies;
  out.grace_cross = g.traffic.machine_cross;
  out.best_eplb_cross = best_eplb->evaluation.total.traffic.machine_cross;
  out.best_eplb = best_eplb->label;
  out.reduction = out.best_eplb_cross > 0
                      ? 1.0 - static_cast<double>(out.grace_cross) / out.best_eplb_cross
                      : 0.0;
  out.grace_time_us = g.time_us;
  out.fastest_rival_time_us = fastest->evaluation.total.time_us;
  out.fastest_rival = fastest->label;
  out.grace_max_over_mean = g.load.max_over_mean();
  return out;
}

StatusOr<std::vector<BudgetOutcome>> RunFrontier(const Trace& profile, const Trace& holdout,
                                                 const FrontierOptions& options) {
  std::vector<BudgetOutcome> out;
  for (int budget : options.budgets) {
    CompareOptions compare = options.compare;
    compare.redundant = budget;
    if (options.progress) {
      compare.progress = [&, budget](const std::string& stage, int done, int total) {
        options.progress("R=" + std::to_string(budget) + ": " + stage, done, total);
      };
    }
    StatusOr<std::vector<CompareRow>> rows = Compare(profile, holdout, compare);
    if (!rows.ok()) return rows.status().WithContext("R=" + std::to_string(budget));
    ASSIGN_OR_RETURN(BudgetOutcome outcome, SummarizeBudget(*rows, budget));
    out.push_back(std::move(outcome));
  }
  return out;
}

std::string FormatFrontierTable(const std::vector<BudgetOutcome>& outcomes, int num_experts) {
  auto line = [](const char* fmt, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), fmt, args...);
    return std::string(buf);
  };
  std::string out =
      line("%5s %7s %6s %12s %12s %-18s %7s %9s %9s %9s %s\n", "R", "share", "copies", "cross-mach",
           "best-eplb", "(row)", "fewer", "max/mean", "time-us", "rival-us", "(fastest rival)");
  for (const BudgetOutcome& o : outcomes) {
    out += line("%5d %6.1f%% %6d %12lld %12lld %-18s %6.1f%% %9.3f %9.1f %9.1f %s\n",
                o.redundant_slots, 100.0 * o.redundant_slots / std::max(num_experts, 1),
                o.grace_extra_copies, static_cast<long long>(o.grace_cross),
                static_cast<long long>(o.best_eplb_cross), o.best_eplb.c_str(), 100.0 * o.reduction,
                o.grace_max_over_mean, o.grace_time_us, o.fastest_rival_time_us,
                o.fastest_rival.c_str());
  }
  return out;
}

std::string FrontierJson(const std::vector<BudgetOutcome>& outcomes, const Topology& topology,
                         int num_experts) {
  nlohmann::json points = nlohmann::json::array();
  for (const BudgetOutcome& o : outcomes) {
    points.push_back({{"redundant_slots", o.redundant_slots},
                      {"grace_extra_copies", o.grace_extra_copies},
                      {"grace_machine_cross", o.grace_cross},
                      {"best_eplb", o.best_eplb},
                      {"best_eplb_machine_cross", o.best_eplb_cross},
                      {"reduction", o.reduction},
                      {"grace_max_over_mean", o.grace_max_over_mean},
                      {"grace_time_us", o.grace_time_us},
                      {"fastest_rival", o.fastest_rival},
                      {"fastest_rival_time_us", o.fastest_rival_time_us}});
  }
  nlohmann::json j{
      {"topology",
       {{"num_nodes", topology.num_nodes}, {"ranks_per_node", topology.ranks_per_node}}},
      {"num_experts", num_experts},
      {"frontier", points}};
  return j.dump(2) + "\n";
}

}  // namespace epserve::placement
