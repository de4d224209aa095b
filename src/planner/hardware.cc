#include "planner/hardware.h"

#include <algorithm>
#include <cctype>

#include "planner/json_util.h"

namespace epserve::planner {
namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

Status RequirePositive(double value, const std::string& field, const std::string& name) {
  if (!(value > 0)) {
    return Status::InvalidArgument("GPU '" + name + "': " + field + " must be > 0");
  }
  return Status::Ok();
}

}  // namespace

Status HardwareSpec::Validate() const {
  if (name.empty()) return Status::InvalidArgument("GPU entry without a name");
  RETURN_IF_ERROR(RequirePositive(fp8_tflops, "fp8_tflops", name));
  RETURN_IF_ERROR(RequirePositive(bf16_tflops, "bf16_tflops", name));
  RETURN_IF_ERROR(RequirePositive(memory_gb, "memory_gb", name));
  RETURN_IF_ERROR(RequirePositive(memory_bandwidth_tbs, "memory_bandwidth_tbs", name));
  RETURN_IF_ERROR(RequirePositive(nvlink_gbs, "nvlink_gbs", name));
  RETURN_IF_ERROR(RequirePositive(infiniband_gbs, "infiniband_gbs", name));
  RETURN_IF_ERROR(RequirePositive(gpus_per_machine, "gpus_per_machine", name));
  if (nvlink_latency_us < 0 || infiniband_latency_us < 0) {
    return Status::InvalidArgument("GPU '" + name + "': latencies must be >= 0");
  }
  return Status::Ok();
}

StatusOr<HardwareSpec> HardwareSpecFromJson(const nlohmann::json& json) {
  HardwareSpec spec;
  spec.name = GetStringOr(json, "name", "");
  if (spec.name.empty())
    return Status::InvalidArgument("hardware catalog: GPU entry without 'name'");
  const std::string context = "GPU '" + spec.name + "'";
  spec.description = GetStringOr(json, "description", "");
  ASSIGN_OR_RETURN(spec.fp8_tflops, GetNumber(json, "fp8_tflops", context));
  ASSIGN_OR_RETURN(spec.bf16_tflops, GetNumber(json, "bf16_tflops", context));
  ASSIGN_OR_RETURN(spec.memory_gb, GetNumber(json, "memory_gb", context));
  ASSIGN_OR_RETURN(spec.memory_bandwidth_tbs, GetNumber(json, "memory_bandwidth_tbs", context));
  ASSIGN_OR_RETURN(spec.nvlink_gbs, GetNumber(json, "nvlink_gbs", context));
  ASSIGN_OR_RETURN(spec.nvlink_latency_us, GetNumberOr(json, "nvlink_latency_us", 0, context));
  ASSIGN_OR_RETURN(spec.infiniband_gbs, GetNumber(json, "infiniband_gbs", context));
  ASSIGN_OR_RETURN(spec.infiniband_latency_us,
                   GetNumberOr(json, "infiniband_latency_us", 0, context));
  ASSIGN_OR_RETURN(spec.gpus_per_machine, GetIntOr(json, "gpus_per_machine", 8, context));
  RETURN_IF_ERROR(spec.Validate());
  return spec;
}

nlohmann::json HardwareSpecToJson(const HardwareSpec& spec) {
  return {{"name", spec.name},
          {"description", spec.description},
          {"fp8_tflops", spec.fp8_tflops},
          {"bf16_tflops", spec.bf16_tflops},
          {"memory_gb", spec.memory_gb},
          {"memory_bandwidth_tbs", spec.memory_bandwidth_tbs},
          {"nvlink_gbs", spec.nvlink_gbs},
          {"nvlink_latency_us", spec.nvlink_latency_us},
          {"infiniband_gbs", spec.infiniband_gbs},
          {"infiniband_latency_us", spec.infiniband_latency_us},
          {"gpus_per_machine", spec.gpus_per_machine}};
}

StatusOr<HardwareCatalog> HardwareCatalog::FromJson(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("gpus") || !json["gpus"].is_array()) {
    return Status::InvalidArgument("hardware catalog: expected {\"gpus\": [...]}");
  }
  HardwareCatalog catalog;
  for (const nlohmann::json& entry : json["gpus"]) {
    ASSIGN_OR_RETURN(HardwareSpec spec, HardwareSpecFromJson(entry));
    for (const HardwareSpec& other : catalog.specs_) {
      if (Lower(other.name) == Lower(spec.name)) {
        return Status::InvalidArgument("hardware catalog: GPU '" + spec.name + "' listed twice");
      }
    }
    catalog.specs_.push_back(std::move(spec));
  }
  if (catalog.specs_.empty()) return Status::InvalidArgument("hardware catalog: no GPUs");
  return catalog;
}

StatusOr<HardwareCatalog> HardwareCatalog::LoadFile(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json json, ReadJsonFile(path));
  StatusOr<HardwareCatalog> catalog = FromJson(json);
  if (!catalog.ok()) return catalog.status().WithContext(path);
  return catalog;
}

StatusOr<HardwareSpec> HardwareCatalog::Find(const std::string& name) const {
  for (const HardwareSpec& spec : specs_) {
    if (Lower(spec.name) == Lower(name)) return spec;
  }
  std::string known;
  for (const HardwareSpec& spec : specs_) known += (known.empty() ? "" : ", ") + spec.name;
  return Status::NotFound("unknown GPU '" + name + "' (known: " + known +
                          "; add it to the hardware catalog JSON)");
}

std::vector<std::string> HardwareCatalog::Names() const {
  std::vector<std::string> names;
  for (const HardwareSpec& spec : specs_) names.push_back(spec.name);
  return names;
}

}  // namespace epserve::planner
