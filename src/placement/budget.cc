#include "placement/budget.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace epserve::placement {

namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status CheckMax(int64_t slots, int num_experts, const std::string& what) {
  if (slots > MaxRedundantSlots(num_experts)) {
    return Status::InvalidArgument(
        what + ": " + std::to_string(slots) + " extra slots per layer, more than " +
        std::to_string(MaxRedundantSlots(num_experts)) + " (16 per routed expert)");
  }
  return Status::Ok();
}

}  // namespace

double ExpertBytes(const ModelShape& shape, int weight_bytes) {
  return 3.0 * shape.hidden_size * shape.moe_intermediate_size * weight_bytes;
}

StatusOr<int> ResolveRedundantSlots(const BudgetRequest& request, const ModelShape& shape,
                                    int num_layers) {
  const bool slots = request.redundant_slots >= 0;
  const bool gb = request.copy_budget_gb != 0;
  if (slots && gb) {
    return Status::InvalidArgument(
        "--redundant-slots and --copy-budget-gb both set the copy budget; give one");
  }
  if (slots) {
    RETURN_IF_ERROR(CheckMax(request.redundant_slots, shape.num_experts,
                             "--redundant-slots " + std::to_string(request.redundant_slots)));
    return request.redundant_slots;
  }
  if (!gb) return DefaultRedundantSlots(shape.num_experts);
  const std::string flag = "--copy-budget-gb " + Number(request.copy_budget_gb);
  if (!std::isfinite(request.copy_budget_gb) || request.copy_budget_gb < 0) {
    return Status::InvalidArgument(flag + ": must be a finite number > 0");
  }
  if (request.weight_bytes < 1) {
    return Status::InvalidArgument("weight bytes must be at least 1, got " +
                                   std::to_string(request.weight_bytes));
  }
  const double per_slot = ExpertBytes(shape, request.weight_bytes) * std::max(num_layers, 1);
  const double fit = std::floor(request.copy_budget_gb * 1e9 / per_slot);
  if (fit > MaxRedundantSlots(shape.num_experts)) {
    return CheckMax(static_cast<int64_t>(std::min(fit, 1e15)), shape.num_experts, flag);
  }
  return static_cast<int>(fit);
}

StatusOr<std::vector<int>> ParseBudgetList(std::string_view list, int num_experts,
                                           std::string_view flag) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string entry(list.substr(start, end - start));
    const std::string where =
        std::string(flag) + " " + std::string(list) + ": entry \"" + entry + "\"";
    const bool percent = !entry.empty() && entry.back() == '%';
    const std::string number = percent ? entry.substr(0, entry.size() - 1) : entry;
    char* stop = nullptr;
    const double v = number.empty() ? NAN : std::strtod(number.c_str(), &stop);
    if (number.empty() || stop != number.c_str() + number.size() || !std::isfinite(v) || v < 0 ||
        (!percent && v != std::floor(v))) {
      return Status::InvalidArgument(
          where + " is not a slot count (e.g. 8) or a share of the experts (e.g. 12.5%)");
    }
    const double slots = percent ? std::floor(v * num_experts / 100.0 + 1e-9) : v;
    if (slots > MaxRedundantSlots(num_experts)) {
      return Status::InvalidArgument(where + " is more than " +
                                     std::to_string(MaxRedundantSlots(num_experts)) +
                                     " extra slots per layer (16 per routed expert)");
    }
    out.push_back(static_cast<int>(slots));
    start = end + 1;
  }
  return out;
}

}  // namespace epserve::placement
