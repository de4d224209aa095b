#include "planner/report_json.h"

#include <cmath>
#include <sstream>

namespace epserve::planner {

nlohmann::json DeploymentToJson(const Deployment& d) {
  return {{"machines", d.num_machines},
          {"gpus_per_machine", d.gpus_per_machine},
          {"ep", d.ep},
          {"dp", d.dp},
          {"tp", d.tp},
          {"redundant_experts", d.redundant_experts}};
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
                      {"destinations_per_token", layer.destinations_per_token},
                      {"rank_rows_max_over_mean", layer.rank_rows_max_over_mean}};
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
          {"redundant_experts", p.deployment.redundant_experts},
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
         "throughput_per_machine,throughput_per_gpu,max_batch,on_frontier,redundant_experts\n";
  for (const SweepPoint& p : result.points) {
    const StepEstimate& s = p.estimate;
    out << p.gpu << ',' << p.deployment.ep << ',' << p.deployment.dp << ',' << p.deployment.tp
        << ',' << p.deployment.num_machines << ',' << p.batch << ',' << OverlapModeName(s.mode)
        << ',' << s.step_us << ',' << s.moe_layer.total_us << ',' << s.speed << ','
        << s.throughput_per_machine << ',' << s.throughput_per_gpu << ',' << s.memory.max_batch
        << ',' << (p.on_frontier ? 1 : 0) << ',' << p.deployment.redundant_experts << '\n';
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

nlohmann::json PrefillToJson(const PrefillEstimate& e) {
  nlohmann::json passes = nlohmann::json::array();
  for (const PrefillPass& p : e.passes) {
    nlohmann::json segments = nlohmann::json::array();
    for (const PrefillSegment& s : p.segments) {
      segments.push_back({{"tokens", s.tokens}, {"prefix", s.prefix}});
    }
    passes.push_back({{"segments", segments},
                      {"finished_prompts", p.finished_prompts},
                      {"mode", OverlapModeName(p.mode)},
                      {"pass_us", p.pass_us},
                      {"moe_layers_us", p.moe_layers_us},
                      {"dense_layers_us", p.dense_layers_us},
                      {"mtp_us", p.mtp_us},
                      {"lm_head_us", p.lm_head_us},
                      {"overhead_us", p.overhead_us},
                      {"moe_layer", LayerToJson(p.moe_layer)},
                      {"dense_layer", LayerToJson(p.dense_layer)}});
  }
  return {{"total_us", e.total_us},
          {"prompt_tokens", e.prompt_tokens},
          {"busy_groups", e.busy_groups},
          {"prompt_done_us", e.prompt_done_us},
          {"tokens_per_s_per_gpu", e.tokens_per_s_per_gpu},
          {"tokens_per_s_per_machine", e.tokens_per_s_per_machine},
          {"memory", MemoryToJson(e.memory)},
          {"passes", passes}};
}

nlohmann::json TtftToJson(const TtftEstimate& t) {
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"service_us", t.service_us},   {"utilization", t.utilization},
          {"wait_us", finite(t.wait_us)}, {"ttft_us", finite(t.ttft_us)},
          {"busy_groups", t.busy_groups}, {"stable", t.stable}};
}

namespace {

nlohmann::json PoolHead(const std::string& gpu, const Deployment& d, int replicas) {
  nlohmann::json out = DeploymentToJson(d);
  out["gpu"] = gpu;
  out["replicas"] = replicas;
  out["total_machines"] = replicas * d.num_machines;
  return out;
}

nlohmann::json ColocatedToJson(const ColocatedPool& c) {
  nlohmann::json out = PoolHead(c.gpu, c.deployment, c.replicas);
  out["chunk_tokens"] = c.chunk_tokens;
  out["batch"] = c.batch;
  out["busy_groups"] = c.busy_groups;
  out["decode_step_us"] = c.decode_step_us;
  out["mixed_step_us"] = c.mixed_step_us;
  out["mixed_fraction"] = c.mixed_fraction;
  out["utilization"] = c.utilization;
  out["ttft_us"] = c.ttft_us;
  out["tpot_us"] = c.tpot_us;
  out["meets"] = c.meets;
  return out;
}

}  // namespace

nlohmann::json DisaggToJson(const DisaggPlan& plan) {
  const ServingTarget& t = plan.target;
  nlohmann::json prefill =
      PoolHead(plan.prefill.gpu, plan.prefill.deployment, plan.prefill.replicas);
  prefill["chunk_tokens"] = plan.prefill.chunk_tokens;
  prefill["ttft"] = TtftToJson(plan.prefill.ttft);
  prefill["kv_transfer_us"] = plan.prefill.kv_transfer_us;
  prefill["kv_link_utilization"] = plan.prefill.kv_link_utilization;
  nlohmann::json decode = PoolHead(plan.decode.gpu, plan.decode.deployment, plan.decode.replicas);
  decode["batch"] = plan.decode.batch;
  decode["mode"] = OverlapModeName(plan.decode.step.mode);
  decode["step_us"] = plan.decode.step.step_us;
  decode["tokens_per_step"] = plan.decode.step.tokens_per_step;
  decode["tpot_us"] = plan.decode.tpot_us;
  decode["max_batch"] = plan.decode.step.memory.max_batch;
  nlohmann::json out = {{"target",
                         {{"prompt_len", t.prompt_len},
                          {"output_len", t.output_len},
                          {"rate", t.rate},
                          {"ttft_slo_ms", t.ttft_slo_ms},
                          {"tpot_slo_ms", t.tpot_slo_ms}}},
                        {"kv_bytes_per_request", plan.kv_bytes_per_request},
                        {"prefill", prefill},
                        {"decode", decode},
                        {"machines", plan.machines},
                        {"gpus", plan.gpus},
                        {"colocated_same_size", nullptr},
                        {"colocated_smallest", nullptr}};
  if (plan.colocated_same_size)
    out["colocated_same_size"] = ColocatedToJson(*plan.colocated_same_size);
  if (plan.colocated_smallest)
    out["colocated_smallest"] = ColocatedToJson(*plan.colocated_smallest);
  return out;
}

}  // namespace epserve::planner
