#include "tools/bench_decode_gpu.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/synthetic.h"
#include "tools/device_flag.h"

#ifdef EPSERVE_HAVE_CUDA
#include "cuda/decode_bench.h"
#endif

namespace epserve::tools {

namespace {

#ifdef EPSERVE_HAVE_CUDA
void PrintJson(const GpuDecodeFlags& f, const ModelConfig& c, const std::string& dtype,
               const cuda::GpuDecodeBenchResult& r) {
  nlohmann::json j;
  j["device"] = r.device.Describe();
  j["preset"] = f.preset;
  j["layers"] = c.num_hidden_layers;
  j["moe_layers"] = r.moe_layers;
  j["dtype"] = dtype;
  j["kv_dtype"] = f.kv_dtype;
  j["context"] = f.context;
  j["steps"] = f.steps;
  j["warmup_steps"] = f.warmup;
  j["same_tokens"] = f.same_tokens;
  j["weight_bytes"] = r.weight_bytes;
  j["weights_seconds"] = r.weights_seconds;
  j["kv_cache_bytes"] = r.kv_bytes;
  j["hbm_copy_gbps"] = r.hbm_gbps;
  j["experts_counted"] = "expected_uniform_routing";
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["rows"].push_back({{"batch", row.batch},
                         {"tokens_per_s", row.tokens_per_s},
                         {"step_ms", row.step_ms},
                         {"median_step_ms", row.median_step_ms},
                         {"min_step_ms", row.min_step_ms},
                         {"experts_per_moe_layer", row.experts_per_layer},
                         {"dense_bytes_per_step", row.dense_bytes},
                         {"routed_bytes_per_step", row.routed_bytes},
                         {"lm_head_bytes_per_step", row.lm_head_bytes},
                         {"kv_bytes_per_step", row.kv_bytes},
                         {"bytes_per_step", row.total_bytes()},
                         {"achieved_gbps", row.achieved_gbps},
                         {"fraction_of_hbm", row.achieved_gbps / r.hbm_gbps},
                         {"median_step_gbps", row.median_gbps},
                         {"median_step_fraction_of_hbm", row.median_gbps / r.hbm_gbps}});
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintTable(const GpuDecodeFlags& f, const ModelConfig& c, const std::string& dtype,
                const cuda::GpuDecodeBenchResult& r, int preset_layers) {
  std::printf("device: %s\n", r.device.Describe().c_str());
  std::printf(
      "model: preset %s, %d of %d layers (%d MoE), %s weights %.2f GB made on the device in "
      "%.1f s; latent cache %s, %.2f GB\n",
      f.preset.c_str(), c.num_hidden_layers, preset_layers, r.moe_layers, dtype.c_str(),
      r.weight_bytes / 1e9, r.weights_seconds, f.kv_dtype.c_str(), r.kv_bytes / 1e9);
  std::printf("workload: %d cached positions per sequence, %d warm-up + %d timed steps, %s\n",
              f.context, f.warmup, f.steps,
              f.same_tokens ? "every sequence fed token 0" : "greedy tokens");
  std::printf("HBM bandwidth (device-to-device copy, bytes read + written / time): %.0f GB/s\n",
              r.hbm_gbps);
  std::printf(
      "bytes per step: dense = attention projections, norms, dense MLPs, routers, shared experts,\n"
      "embedding rows; routed = expected distinct experts per MoE layer for uniform top-%d "
      "routing\n"
      "(routes are not observed%s) x an expert's bytes; head = lm_head; KV = cached rows read\n",
      c.num_experts_per_tok, f.same_tokens ? "; with one token for all, an upper bound" : "");
  std::printf("%6s %10s %9s %9s %9s %9s %9s %8s %8s %9s %7s\n", "batch", "tokens/s", "step ms",
              "median", "dense GB", "experts/L", "routed GB", "head GB", "KV GB", "GB/s", "of HBM");
  for (const auto& row : r.rows)
    std::printf("%6d %10.1f %9.3f %9.3f %9.3f %9.1f %9.3f %8.3f %8.3f %9.1f %6.1f%%\n", row.batch,
                row.tokens_per_s, row.step_ms, row.median_step_ms, row.dense_bytes / 1e9,
                row.experts_per_layer, row.routed_bytes / 1e9, row.lm_head_bytes / 1e9,
                row.kv_bytes / 1e9, row.achieved_gbps, 100.0 * row.achieved_gbps / r.hbm_gbps);
}
#endif

}  // namespace

Status RunGpuDecode(const GpuDecodeFlags& f) {
  ASSIGN_OR_RETURN(const int index, ParseDeviceIndex(f.device));
  ASSIGN_OR_RETURN(ModelConfig preset, PresetConfig(f.preset));
  const int preset_layers = preset.num_hidden_layers;
  ModelConfig config = preset;
  if (f.layers > 0) {
    ASSIGN_OR_RETURN(config, WithLayers(preset, f.layers));
  }
  const std::string dtype = !f.dtype.empty() ? f.dtype : (f.preset == "v3" ? "fp8" : "bf16");
  if (dtype != "bf16" && dtype != "fp8")
    return Status::InvalidArgument("--dtype " + dtype + ": want bf16 or fp8");
  ASSIGN_OR_RETURN(const KvDType kv_dtype, ParseKvDType(f.kv_dtype));
#ifndef EPSERVE_HAVE_CUDA
  (void)index;
  (void)preset_layers;
  (void)kv_dtype;
  return Status::InvalidArgument("--device " + f.device +
                                 ": this epserve was built without the CUDA backend "
                                 "(no nvcc at build time; docs/testing.md, \"GPU\")");
#else
  cuda::GpuDecodeBenchOptions o{
      .config = config,
      .dtype = dtype == "fp8" ? WeightDType::kFP8 : WeightDType::kBF16,
      .seed = f.seed,
      .device = index,
      .batches = f.batches,
      .context = f.context,
      .steps = f.steps,
      .warmup_steps = f.warmup,
      .kv_dtype = kv_dtype,
      .tokens = f.same_tokens ? cuda::DecodeTokens::kSame : cuda::DecodeTokens::kGreedy,
      .bandwidth_gib = f.bandwidth_gib,
      .log = [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
      }};
  auto result = cuda::RunGpuDecodeBench(o);
  if (!result.ok()) return result.status().WithContext("--device " + f.device);
  if (f.json)
    PrintJson(f, config, dtype, *result);
  else
    PrintTable(f, config, dtype, *result, preset_layers);
  return Status::Ok();
#endif
}

}  // namespace epserve::tools
