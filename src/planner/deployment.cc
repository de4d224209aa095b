#include "planner/deployment.h"

#include <cctype>

namespace epserve::planner {

const char* OverlapModeName(OverlapMode mode) {
  switch (mode) {
    case OverlapMode::kNone:
      return "none";
    case OverlapMode::kDispatchOverlap:
      return "dispatch-overlap";
    case OverlapMode::kMicroBatch:
      return "micro-batch";
  }
  return "?";
}

StatusOr<OverlapMode> ParseOverlapMode(const std::string& text) {
  std::string t;
  for (char c : text) {
    if (c != '-' && c != '_') t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (t == "none" || t == "nooverlap") return OverlapMode::kNone;
  if (t == "dispatch" || t == "dispatchoverlap") return OverlapMode::kDispatchOverlap;
  if (t == "microbatch" || t == "micro") return OverlapMode::kMicroBatch;
  return Status::InvalidArgument("unknown overlap mode '" + text +
                                 "' (none, dispatch-overlap, micro-batch)");
}

Status Deployment::Validate(const ModelSpec& model) const {
  const std::string what = ToString();
  if (ep <= 0 || dp <= 0 || tp <= 0 || num_machines <= 0 || gpus_per_machine <= 0) {
    return Status::InvalidArgument(what + ": EP, DP, TP, machines and GPUs must be positive");
  }
  if (ep != dp * tp) {
    return Status::InvalidArgument(what + ": EP must equal DP x TP (" + std::to_string(dp) + " x " +
                                   std::to_string(tp) + " = " + std::to_string(dp * tp) + ")");
  }
  RETURN_IF_ERROR(CheckExpertSlots(model, ep, redundant_experts));
  if (tp > gpus_per_machine || gpus_per_machine % tp != 0) {
    return Status::InvalidArgument(
        what + ": a DP group of TP " + std::to_string(tp) + " GPUs would span machines of " +
        std::to_string(gpus_per_machine) + " GPUs (an engine instance never spans machines)");
  }
  if (ep > gpus_per_machine && ep % gpus_per_machine != 0) {
    return Status::InvalidArgument(what + ": EP " + std::to_string(ep) +
                                   " does not fill whole machines of " +
                                   std::to_string(gpus_per_machine) + " GPUs");
  }
  const int needed = (ep + gpus_per_machine - 1) / gpus_per_machine;
  if (num_machines != needed) {
    return Status::InvalidArgument(what + ": EP " + std::to_string(ep) + " needs " +
                                   std::to_string(needed) + " machine(s) of " +
                                   std::to_string(gpus_per_machine) + " GPUs");
  }
  if (model.num_attention_heads % tp != 0) {
    return Status::InvalidArgument(what + ": TP " + std::to_string(tp) + " does not divide the " +
                                   std::to_string(model.num_attention_heads) + " attention heads");
  }
  return Status::Ok();
}

Status CheckExpertSlots(const ModelSpec& model, int ep, int redundant) {
  const int experts = model.n_routed_experts;
  if (redundant < 0) {
    return Status::InvalidArgument("--redundant-experts " + std::to_string(redundant) +
                                   " must be >= 0");
  }
  if (ep <= 0) return Status::InvalidArgument("EP " + std::to_string(ep) + " must be positive");
  const int slots = experts + redundant;
  if (slots % ep == 0) return Status::Ok();
  if (redundant == 0) {
    const int up = (slots + ep - 1) / ep * ep - experts;
    return Status::InvalidArgument(
        "EP " + std::to_string(ep) + " does not divide the " + std::to_string(experts) +
        " routed experts of " + model.name + " (with --redundant-experts " + std::to_string(up) +
        " every rank would hold " + std::to_string((experts + up) / ep) + " expert slots)");
  }
  const int down = slots / ep * ep - experts;  // may be negative: then only `up` applies
  const int up = (slots / ep + 1) * ep - experts;
  std::string hint = "--redundant-experts " + std::to_string(up);
  if (down >= 0) hint = "--redundant-experts " + std::to_string(down) + " or " + std::to_string(up);
  return Status::InvalidArgument("EP " + std::to_string(ep) + " with --redundant-experts " +
                                 std::to_string(redundant) + ": " + std::to_string(experts) +
                                 " + " + std::to_string(redundant) + " = " + std::to_string(slots) +
                                 " expert slots do not split evenly over " + std::to_string(ep) +
                                 " ranks (" + std::to_string(slots) + " % " + std::to_string(ep) +
                                 " = " + std::to_string(slots % ep) + "; " + hint + " would)");
}

std::string Deployment::ToString() const {
  return "EP" + std::to_string(ep) +
         (redundant_experts > 0 ? "+" + std::to_string(redundant_experts) : std::string()) + " DP" +
         std::to_string(dp) + " TP" + std::to_string(tp) + " on " + std::to_string(num_machines) +
         (num_machines == 1 ? " machine" : " machines");
}

StatusOr<Deployment> MakeDeployment(const ModelSpec& model, int ep, int tp, int gpus_per_machine) {
  return MakeDeployment(model,
                        DeploymentShape{.ep = ep, .tp = tp, .gpus_per_machine = gpus_per_machine});
}

StatusOr<Deployment> MakeDeployment(const ModelSpec& model, const DeploymentShape& shape) {
  const int ep = shape.ep;
  const int tp = shape.tp;
  const int gpus_per_machine = shape.gpus_per_machine;
  if (tp <= 0 || ep <= 0 || ep % tp != 0) {
    return Status::InvalidArgument("TP " + std::to_string(tp) + " does not divide EP " +
                                   std::to_string(ep));
  }
  if (gpus_per_machine <= 0) return Status::InvalidArgument("GPUs per machine must be positive");
  Deployment d{.num_machines = (ep + gpus_per_machine - 1) / gpus_per_machine,
               .gpus_per_machine = gpus_per_machine,
               .ep = ep,
               .dp = ep / tp,
               .tp = tp,
               .redundant_experts = shape.redundant_experts};
  RETURN_IF_ERROR(d.Validate(model));
  return d;
}

Status Workload::Validate() const {
  if (batch < 0) return Status::InvalidArgument("batch (requests per DP group) must be >= 0");
  if (kv_len < 0) return Status::InvalidArgument("KV length must be >= 0");
  if (query_len < 1) return Status::InvalidArgument("query length must be >= 1");
  if (!(kv_element_bytes > 0)) return Status::InvalidArgument("KV element bytes must be > 0");
  if (!(acceptance_rate >= 0 && acceptance_rate <= 1)) {
    return Status::InvalidArgument("acceptance rate must be in [0, 1]");
  }
  return Status::Ok();
}

double Workload::TokensPerStep() const {
  double tokens = 1;
  double p = 1;
  for (int i = 0; i < DraftTokens(); ++i) {
    p *= acceptance_rate;
    tokens += p;
  }
  return tokens;
}

}  // namespace epserve::planner
