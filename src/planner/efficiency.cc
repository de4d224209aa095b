#include "planner/efficiency.h"

#include "planner/json_util.h"

namespace epserve::planner {
namespace {

Status CheckFraction(double value, const std::string& field) {
  if (!(value > 0 && value <= 1.0)) {
    return Status::InvalidArgument("efficiency: " + field + " must be in (0, 1], got " +
                                   std::to_string(value));
  }
  return Status::Ok();
}

Status CheckOverhead(double value, const std::string& field) {
  if (!(value >= 0)) return Status::InvalidArgument("efficiency: " + field + " must be >= 0");
  return Status::Ok();
}

Status CheckKernel(const KernelEfficiency& k, const std::string& name) {
  RETURN_IF_ERROR(CheckFraction(k.compute, name + ".compute"));
  RETURN_IF_ERROR(CheckFraction(k.memory, name + ".memory"));
  return CheckOverhead(k.overhead_us, name + ".overhead_us");
}

Status CheckComm(const CommEfficiency& c, const std::string& name) {
  RETURN_IF_ERROR(CheckFraction(c.nvlink, name + ".nvlink"));
  RETURN_IF_ERROR(CheckFraction(c.infiniband, name + ".infiniband"));
  return CheckOverhead(c.overhead_us, name + ".overhead_us");
}

StatusOr<KernelEfficiency> ParseKernel(const nlohmann::json& json, const std::string& name) {
  if (!json.contains(name)) return Status::NotFound("efficiency: missing '" + name + "'");
  const nlohmann::json& obj = json[name];
  const std::string ctx = "efficiency." + name;
  KernelEfficiency k;
  ASSIGN_OR_RETURN(k.compute, GetNumberOr(obj, "compute", 1.0, ctx));
  ASSIGN_OR_RETURN(k.memory, GetNumberOr(obj, "memory", 1.0, ctx));
  ASSIGN_OR_RETURN(k.overhead_us, GetNumberOr(obj, "overhead_us", 0.0, ctx));
  k.source = GetStringOr(obj, "source", "");
  return k;
}

StatusOr<CommEfficiency> ParseComm(const nlohmann::json& json, const std::string& name) {
  if (!json.contains(name)) return Status::NotFound("efficiency: missing '" + name + "'");
  const nlohmann::json& obj = json[name];
  const std::string ctx = "efficiency." + name;
  CommEfficiency c;
  ASSIGN_OR_RETURN(c.nvlink, GetNumberOr(obj, "nvlink", 1.0, ctx));
  ASSIGN_OR_RETURN(c.infiniband, GetNumberOr(obj, "infiniband", 1.0, ctx));
  ASSIGN_OR_RETURN(c.overhead_us, GetNumberOr(obj, "overhead_us", 0.0, ctx));
  c.source = GetStringOr(obj, "source", "");
  return c;
}

nlohmann::json KernelToJson(const KernelEfficiency& k) {
  return {{"compute", k.compute},
          {"memory", k.memory},
          {"overhead_us", k.overhead_us},
          {"source", k.source}};
}

nlohmann::json CommToJson(const CommEfficiency& c) {
  return {{"nvlink", c.nvlink},
          {"infiniband", c.infiniband},
          {"overhead_us", c.overhead_us},
          {"source", c.source}};
}

}  // namespace

Status EfficiencyFactors::Validate() const {
  RETURN_IF_ERROR(CheckKernel(gemm, "gemm"));
  RETURN_IF_ERROR(CheckKernel(group_gemm, "group_gemm"));
  RETURN_IF_ERROR(CheckKernel(bmm, "bmm"));
  RETURN_IF_ERROR(CheckKernel(attention, "attention"));
  RETURN_IF_ERROR(CheckKernel(elementwise, "elementwise"));
  RETURN_IF_ERROR(CheckKernel(prefill_attention, "prefill_attention"));
  RETURN_IF_ERROR(CheckComm(dispatch, "dispatch"));
  RETURN_IF_ERROR(CheckComm(combine, "combine"));
  RETURN_IF_ERROR(CheckComm(tp_collective, "tp_collective"));
  RETURN_IF_ERROR(CheckComm(kv_transfer, "kv_transfer"));
  RETURN_IF_ERROR(CheckOverhead(step_overhead_us, "step.overhead_us"));
  return CheckOverhead(memory_reserve_gb, "memory.reserve_gb");
}

StatusOr<EfficiencyFactors> EfficiencyFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return Status::InvalidArgument("efficiency: expected a JSON object");
  EfficiencyFactors f;
  ASSIGN_OR_RETURN(f.gemm, ParseKernel(json, "gemm"));
  ASSIGN_OR_RETURN(f.group_gemm, ParseKernel(json, "group_gemm"));
  ASSIGN_OR_RETURN(f.bmm, ParseKernel(json, "bmm"));
  ASSIGN_OR_RETURN(f.attention, ParseKernel(json, "attention"));
  ASSIGN_OR_RETURN(f.elementwise, ParseKernel(json, "elementwise"));
  ASSIGN_OR_RETURN(f.dispatch, ParseComm(json, "dispatch"));
  ASSIGN_OR_RETURN(f.combine, ParseComm(json, "combine"));
  ASSIGN_OR_RETURN(f.tp_collective, ParseComm(json, "tp_collective"));
  if (json.contains("prefill_attention")) {
    ASSIGN_OR_RETURN(f.prefill_attention, ParseKernel(json, "prefill_attention"));
  } else {
    f.prefill_attention = f.attention;
    f.prefill_attention.source = "absent from the file: a copy of attention (no prefill figure)";
  }
  if (json.contains("kv_transfer")) {
    ASSIGN_OR_RETURN(f.kv_transfer, ParseComm(json, "kv_transfer"));
  } else {
    f.kv_transfer = f.dispatch;
    f.kv_transfer.source = "absent from the file: a copy of dispatch (no bulk-transfer figure)";
  }
  const nlohmann::json step = json.value("step", nlohmann::json::object());
  ASSIGN_OR_RETURN(f.step_overhead_us, GetNumberOr(step, "overhead_us", 0.0, "efficiency.step"));
  f.step_source = GetStringOr(step, "source", "");
  const nlohmann::json memory = json.value("memory", nlohmann::json::object());
  ASSIGN_OR_RETURN(f.memory_reserve_gb,
                   GetNumberOr(memory, "reserve_gb", 0.0, "efficiency.memory"));
  f.memory_source = GetStringOr(memory, "source", "");
  RETURN_IF_ERROR(f.Validate());
  return f;
}

StatusOr<EfficiencyFactors> LoadEfficiencyFile(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json json, ReadJsonFile(path));
  StatusOr<EfficiencyFactors> factors = EfficiencyFromJson(json);
  if (!factors.ok()) return factors.status().WithContext(path);
  return factors;
}

nlohmann::json EfficiencyToJson(const EfficiencyFactors& f) {
  return {{"gemm", KernelToJson(f.gemm)},
          {"group_gemm", KernelToJson(f.group_gemm)},
          {"bmm", KernelToJson(f.bmm)},
          {"attention", KernelToJson(f.attention)},
          {"elementwise", KernelToJson(f.elementwise)},
          {"prefill_attention", KernelToJson(f.prefill_attention)},
          {"dispatch", CommToJson(f.dispatch)},
          {"combine", CommToJson(f.combine)},
          {"tp_collective", CommToJson(f.tp_collective)},
          {"kv_transfer", CommToJson(f.kv_transfer)},
          {"step", {{"overhead_us", f.step_overhead_us}, {"source", f.step_source}}},
          {"memory", {{"reserve_gb", f.memory_reserve_gb}, {"source", f.memory_source}}}};
}

}  // namespace epserve::planner
