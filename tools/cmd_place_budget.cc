#include "tools/cmd_place_budget.h"

#include <cstdio>

#include "placement/frontier.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

void AddBudgetOptions(CLI::App* cmd, BudgetFlags* flags) {
  cmd->add_option("--redundant-slots", flags->redundant_slots,
                  "copy budget: extra expert slots per MoE layer beyond one per routed expert "
                  "(e.g. 8 of 64 = 12.5% more expert memory); eplb gets all of them, grace at "
                  "most this many (default: half the routed experts)")
      ->check(AtLeast(0));
  cmd->add_option("--copy-budget-gb", flags->copy_budget_gb,
                  "copy budget in GB (10^9 bytes) of extra expert weights over all placed MoE "
                  "layers (BF16): as many extra slots per layer as fit")
      ->check(PositiveReal());
  cmd->add_option("--redundant", flags->legacy_redundant,
                  "extra copies per layer, as --redundant-slots (0: the default budget)")
      ->check(AtLeast(0));
}

bool BudgetGiven(const BudgetFlags& flags) {
  return flags.redundant_slots >= 0 || flags.copy_budget_gb != 0 || flags.legacy_redundant >= 0;
}

StatusOr<int> ResolveBudget(const BudgetFlags& flags, const placement::Trace& trace,
                            int weight_bytes) {
  if (flags.legacy_redundant >= 0 && (flags.redundant_slots >= 0 || flags.copy_budget_gb != 0)) {
    return Status::InvalidArgument(
        "--redundant " + std::to_string(flags.legacy_redundant) +
        ": give the copy budget once (--redundant is the older name of --redundant-slots)");
  }
  placement::BudgetRequest request{.redundant_slots = flags.redundant_slots,
                                   .copy_budget_gb = flags.copy_budget_gb,
                                   .weight_bytes = weight_bytes};
  if (flags.legacy_redundant > 0) request.redundant_slots = flags.legacy_redundant;
  ASSIGN_OR_RETURN(const int slots,
                   placement::ResolveRedundantSlots(request, trace.shape(), trace.num_layers()));
  if (flags.no_replication) return 0;
  return slots;
}

std::string DescribeBudget(int slots, const placement::Trace& trace, int weight_bytes) {
  const int n = trace.shape().num_experts;
  const int layers = trace.num_layers();
  const double gb = static_cast<double>(slots) * layers *
                    placement::ExpertBytes(trace.shape(), weight_bytes) / 1e9;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%d extra slots per layer (%.1f%% of %d experts; %lld over %d layers, %.2f GB of "
                "%d-byte weights)",
                slots, 100.0 * slots / std::max(n, 1), n, static_cast<long long>(slots) * layers,
                layers, gb, weight_bytes);
  return buf;
}

StatusOr<std::string> FrontierReport(
    const std::string& list, const placement::TraceSplit& parts,
    const placement::CompareOptions& options, bool json,
    const std::function<void(const std::string& stage, int done, int total)>& progress) {
  using namespace placement;
  const int n = parts.profile.shape().num_experts;
  ASSIGN_OR_RETURN(std::vector<int> budgets, ParseBudgetList(list, n, "--frontier"));
  ASSIGN_OR_RETURN(
      std::vector<BudgetOutcome> outcomes,
      RunFrontier(parts.profile, parts.holdout,
                  FrontierOptions{
                      .compare = options, .budgets = std::move(budgets), .progress = progress}));
  if (json) return FrontierJson(outcomes, options.topology, n);
  char head[256];
  std::snprintf(head, sizeof(head),
                "profile %lld tokens, evaluate %lld tokens, %d x %d ranks; grace against the best "
                "eplb row and the fastest rival, every strategy given R extra slots per layer\n",
                static_cast<long long>(parts.profile.num_tokens()),
                static_cast<long long>(parts.holdout.num_tokens()), options.topology.num_nodes,
                options.topology.ranks_per_node);
  return head + FormatFrontierTable(outcomes, n);
}

}  // namespace epserve::tools
