#include "planner/report_json.h"

#include <sstream>

namespace epserve::planner {

nlohmann::json DeploymentToJson(const Deployment& d) {
  return {{"machines", d.num_machines},
          {"gpus_per_machine", d.gpus_per_machine},
          {"ep", d.ep},
          {"dp", d.dp},
          {"tp", d.tp}};
}

nlohmann::json WorkloadToJson(const Workload& w) {
  return {{"batch", w.batch},
          {"kv_len", w.kv_len},
          {"query_len", w.query_len},
          {"acceptance_rate", w.acceptance_rate},
          {"kv_element_bytes", w.kv_element_bytes},
          {"tokens_per_step", w.TokensPerStep()}};
}

nlohmann::json KernelCostToJson(const KernelCost& cost) {
  return {{"time_us", cost.time_us},
          {"flops", cost.flops},
          {"bytes", cost.bytes},
          {"intensity", Intensity(cost)},
          {"tflops", AchievedTflops(cost)},
          {"bound", cost.compute_bound ? "compute" : "memory"}};
}

nlohmann::json LayerToJson(const LayerBreakdown& layer) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelTime& k : layer.kernels) {
    nlohmann::json entry = KernelCostToJson(k.cost);
    entry["name"] = k.name;
    entry["kind"] = KernelKindName(k.kind);
    entry["stage"] = k.stage;
    entry["launches"] = k.launches;
    kernels.push_back(std::move(entry));
  }
  nlohmann::json by_kind = nlohmann::json::object();
  for (KernelKind kind :
       {KernelKind::kGemm, KernelKind::kGroupGemm, KernelKind::kBmm, KernelKind::kAttention,
        KernelKind::kElementwise, KernelKind::kTpCollective}) {
    by_kind[KernelKindName(kind)] = layer.KindUs(kind);
  }
  by_kind["dispatch"] = layer.dispatch.visible_us;
  by_kind["combine"] = layer.combine.visible_us;
  auto comm = [](const CommTime& c) {
    return nlohmann::json{
        {"transfer_us", c.transfer_us}, {"visible_us", c.visible_us}, {"bytes", c.bytes}};
  };
  nlohmann::json out = {{"moe", layer.moe},
                        {"mode", OverlapModeName(layer.mode)},
                        {"total_us", layer.total_us},
                        {"compute_us", layer.compute_us},
                        {"dispatch", comm(layer.dispatch)},
                        {"combine", comm(layer.combine)},
                        {"by_kind_us", by_kind},
                        {"kernels", kernels}};
  if (layer.moe) {
    out["routing"] = {{"touched_experts", layer.touched_experts},
                      {"tokens_per_expert", layer.tokens_per_expert},
                      {"destinations_per_token", layer.destinations_per_token}};
  }
  return out;
}

nlohmann::json MemoryToJson(const MemoryFit& fit) {
  return {{"weight_bytes", fit.weight_bytes},
          {"kv_bytes_per_request", fit.kv_bytes_per_request},
          {"reserve_bytes", fit.reserve_bytes},
          {"capacity_bytes", fit.capacity_bytes},
          {"free_for_kv_bytes", fit.free_for_kv_bytes},
          {"max_batch", fit.max_batch},
          {"weights_fit", fit.weights_fit},
          {"batch_fits", fit.batch_fits}};
}

nlohmann::json StepToJson(const StepEstimate& s) {
  return {{"mode", OverlapModeName(s.mode)},
          {"step_us", s.step_us},
          {"moe_layers_us", s.moe_layers_us},
          {"dense_layers_us", s.dense_layers_us},
          {"mtp_us", s.mtp_us},
          {"lm_head_us", s.lm_head_us},
          {"overhead_us", s.overhead_us},
          {"tokens_per_step", s.tokens_per_step},
          {"speed_tokens_per_s", s.speed},
          {"throughput_per_machine", s.throughput_per_machine},
          {"throughput_per_gpu", s.throughput_per_gpu},
          {"memory", MemoryToJson(s.memory)},
          {"moe_layer", LayerToJson(s.moe_layer)},
          {"dense_layer", LayerToJson(s.dense_layer)},
          {"notes", s.notes}};
}

nlohmann::json SweepPointToJson(const SweepPoint& p) {
  const StepEstimate& s = p.estimate;
  return {{"gpu", p.gpu},
          {"ep", p.deployment.ep},
          {"dp", p.deployment.dp},
          {"tp", p.deployment.tp},
          {"machines", p.deployment.num_machines},
          {"batch", p.batch},
          {"mode", OverlapModeName(s.mode)},
          {"step_us", s.step_us},
          {"moe_layer_us", s.moe_layer.total_us},
          {"speed_tokens_per_s", s.speed},
          {"throughput_per_machine", s.throughput_per_machine},
          {"throughput_per_gpu", s.throughput_per_gpu},
          {"max_batch", s.memory.max_batch},
          {"on_frontier", p.on_frontier}};
}

nlohmann::json SweepToJson(const SweepResult& result) {
  nlohmann::json points = nlohmann::json::array();
  for (const SweepPoint& p : result.points) points.push_back(SweepPointToJson(p));
  return {{"points", points}, {"skipped", result.skipped}};
}

std::string SweepToCsv(const SweepResult& result) {
  std::ostringstream out;
  out << "gpu,ep,dp,tp,machines,batch,mode,step_us,moe_layer_us,speed_tokens_per_s,"
         "throughput_per_machine,throughput_per_gpu,max_batch,on_frontier\n";
  for (const SweepPoint& p : result.points) {
    const StepEstimate& s = p.estimate;
    out << p.gpu << ',' << p.deployment.ep << ',' << p.deployment.dp << ',' << p.deployment.tp
        << ',' << p.deployment.num_machines << ',' << p.batch << ',' << OverlapModeName(s.mode)
        << ',' << s.step_us << ',' << s.moe_layer.total_us << ',' << s.speed << ','
        << s.throughput_per_machine << ',' << s.throughput_per_gpu << ',' << s.memory.max_batch
        << ',' << (p.on_frontier ? 1 : 0) << '\n';
  }
  return out.str();
}

nlohmann::json PickToJson(const PickResult& pick) {
  nlohmann::json out = {{"found", pick.found}, {"min_speed", pick.min_speed}};
  if (!pick.found) return out;
  out["cheapest"] = SweepPointToJson(pick.cheapest);
  out["best_throughput"] = SweepPointToJson(pick.best_throughput);
  nlohmann::json per_ep = nlohmann::json::array();
  for (const SweepPoint& p : pick.best_per_ep) per_ep.push_back(SweepPointToJson(p));
  out["best_per_ep"] = per_ep;
  return out;
}

}  // namespace epserve::planner
