#include "tools/cmd_plan_common.h"

#include <algorithm>
#include <cstdio>

#include "planner/placement_layout.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

using namespace epserve::planner;

StatusOr<Loaded> Load(const CommonFlags& f) {
  Loaded l;
  ASSIGN_OR_RETURN(l.catalog, HardwareCatalog::LoadFile(f.hardware));
  ASSIGN_OR_RETURN(l.hw, l.catalog.Find(f.gpu));
  ASSIGN_OR_RETURN(l.model, LoadModelConfig(ResolveModelConfigPath(f.model)));
  ASSIGN_OR_RETURN(l.eff, LoadEfficiencyFile(f.efficiency));
  if (!f.trace.empty()) {
    ASSIGN_OR_RETURN(RoutingTrace trace, LoadRoutingTrace(f.trace));
    l.trace = std::move(trace);
  }
  if (f.overlap != "best") {
    ASSIGN_OR_RETURN(OverlapMode mode, ParseOverlapMode(f.overlap));
    l.overlap = mode;
  }
  l.workload = {.batch = f.batch,
                .kv_len = f.kv_len,
                .query_len = f.query_len,
                .acceptance_rate = f.acceptance,
                .kv_element_bytes = f.kv_element_bytes};
  RETURN_IF_ERROR(l.workload.Validate());
  return l;
}

void AddCommonOptions(CLI::App* cmd, CommonFlags* f, WorkloadFlags workload) {
  cmd->add_option("--model", f->model,
                  "config.json (or its folder), or a name under data/planner/models")
      ->capture_default_str();
  cmd->add_option("--gpu", f->gpu, "GPU name in the hardware catalog")->capture_default_str();
  cmd->add_option("--hardware", f->hardware, "hardware catalog JSON")->capture_default_str();
  cmd->add_option("--efficiency", f->efficiency, "efficiency factors JSON")->capture_default_str();
  cmd->add_flag("--json", f->json, "print one JSON object (fields in docs/planner.md)");
  if (workload == WorkloadFlags::kNone) return;
  cmd->add_option("--gpus-per-machine", f->gpus_per_machine, "default: the GPU's catalog entry")
      ->check(IntRange(1, 4096));
  cmd->add_option("--kv-element-bytes", f->kv_element_bytes,
                  "bytes per latent-cache element (2: BF16; 4: the CPU engine's f32 cache)")
      ->check(RealRange(0, 64, LowerEnd::kOpen))
      ->capture_default_str();
  cmd->add_option("--overlap", f->overlap, "none | dispatch-overlap | micro-batch | best")
      ->capture_default_str();
  cmd->add_option("--trace", f->trace, "routing trace CSV file or folder (default: uniform)");
  if (workload == WorkloadFlags::kPrefill) return;
  cmd->add_option("--query-len", f->query_len, "tokens per request per step (1 + MTP drafts)")
      ->check(IntRange(1, 1024))
      ->capture_default_str();
  cmd->add_option("--acceptance", f->acceptance, "draft token acceptance rate")
      ->check(RealRange(0, 1))
      ->capture_default_str();
  if (workload == WorkloadFlags::kServing) return;
  cmd->add_option("--kv-len", f->kv_len, "cached tokens per request")
      ->check(IntRange(0, 1 << 30))
      ->capture_default_str();
}

void AddLayoutOptions(CLI::App* cmd, LayoutFlags* f) {
  cmd->add_option("--redundant-experts", f->redundant,
                  "extra expert slots over all ranks: each rank holds (experts + R) / EP, which "
                  "must be whole; copies of the heaviest experts, placed like EPLB (default 0, "
                  "or what --placement needs)")
      ->check(IntRange(0, 1 << 20));
  cmd->add_option("--placement", f->placement,
                  "`epserve place` output (docs/placement-format.md): the experts of every rank "
                  "per layer; its rank count must equal --ep");
}

StatusOr<Layout> ResolveLayout(const LayoutFlags& f, const ModelSpec& model, int ep) {
  Layout out;
  out.redundant_experts = f.redundant > 0 ? f.redundant : 0;
  if (f.placement.empty()) return out;
  ASSIGN_OR_RETURN(ExpertPlacement placement, LoadPlacementLayout(f.placement));
  if (placement.num_ranks != ep) {
    return Status::InvalidArgument("--placement " + f.placement + " places experts on " +
                                   std::to_string(placement.num_ranks) + " ranks but --ep is " +
                                   std::to_string(ep));
  }
  int most = 0;
  for (const ExpertLayout& layer : placement.layers) most = std::max(most, layer.MaxSlots());
  const int needed = most * ep - model.n_routed_experts;
  if (f.redundant < 0) {
    out.redundant_experts = std::max(0, needed);  // every rank provisioned like the fullest
  } else if (f.redundant < needed) {
    return Status::InvalidArgument(
        "--placement " + f.placement + " puts " + std::to_string(most) +
        " expert slots on its fullest rank, which needs --redundant-experts " +
        std::to_string(needed) + " at EP " + std::to_string(ep) + ", not " +
        std::to_string(f.redundant));
  }
  out.placement = std::move(placement);
  return out;
}

StatusOr<RoutingModel> BuildRouting(const Loaded& l, const Deployment& d, const Layout& layout) {
  return RoutingModel::Create(l.model,
                              {.ep = d.ep,
                               .ranks_per_machine = d.RanksPerMachine(),
                               .redundant_experts = d.redundant_experts,
                               .trace = l.trace ? &*l.trace : nullptr,
                               .placement = layout.placement ? &*layout.placement : nullptr});
}

StatusOr<std::vector<int>> ParseNonNegativeList(const std::string& text, const std::string& flag) {
  std::vector<int> values;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t dash = item.find('-', 1);
    try {
      size_t used = 0;
      const int lo = std::stoi(item.substr(0, dash), &used);
      int hi = lo;
      bool whole = used == (dash == std::string::npos ? item.size() : dash);
      if (dash != std::string::npos) {
        hi = std::stoi(item.substr(dash + 1), &used);
        whole = whole && used == item.size() - dash - 1;
      }
      if (!whole || lo < 0 || hi < lo || hi - lo > 100000) throw std::invalid_argument(item);
      for (int v = lo; v <= hi; ++v) values.push_back(v);
    } catch (...) {
      return Status::InvalidArgument(flag + ": '" + item +
                                     "' is not a non-negative integer or A-B range");
    }
    start = end + 1;
  }
  return values;
}

std::vector<std::string> InputFiles(const CommonFlags& f) {
  return {f.model, f.hardware, f.efficiency, f.trace};
}

void Print(const nlohmann::json& json) { std::printf("%s\n", json.dump(2).c_str()); }

nlohmann::json InputsJson(const Loaded& l, const CommonFlags& f) {
  return {{"model", l.model.name},
          {"gpu", l.hw.name},
          {"routing", f.trace.empty() ? "uniform" : f.trace},
          {"overlap", f.overlap},
          {"kv_bytes_per_token", l.model.KvBytesPerToken()},
          {"kv_bytes_per_token_with_mtp", l.model.KvBytesPerTokenWithMtp()}};
}

void PrintLayerTable(const LayerBreakdown& layer) {
  std::printf("  %-5s %-20s %8s %10s %9s %9s  %s\n", "stage", "kernel", "launches", "time us",
              "TFLOP/s", "FLOP/B", "bound");
  for (const KernelTime& k : layer.kernels) {
    std::printf("  %-5d %-20s %8d %10.1f %9.1f %9.1f  %s\n", k.stage, k.name.c_str(), k.launches,
                k.cost.time_us, AchievedTflops(k.cost), Intensity(k.cost),
                k.cost.compute_bound ? "compute" : "memory");
  }
}

}  // namespace epserve::tools
