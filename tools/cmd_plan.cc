// `epserve plan ...`: the deployment planner (docs/planner.md). Subcommands:
//   layer      per-kernel breakdown of one MoE layer, the decode step and the memory fit
//   sweep      EP x TP x batch sweep with the Pareto frontier per EP (table, --json, --csv)
//   pick       the cheapest deployment meeting --min-speed and the best throughput at it
//   roofline   modeled GroupGEMM and GEMM points against the roofs (for the charts)
//   calibrate  fit efficiency factors to measured kernel times (--measured FILE)
//   import-bench  `epserve bench kernels --json` runs -> calibration CSV + catalog entry (CPU)
//   prefill    per-layer prefill time and time to first token (cmd_plan_prefill.cc)
//   disagg     prefill and decode pools meeting TTFT/TPOT SLOs, vs co-located (cmd_plan_disagg.cc)
// Every subcommand prints one JSON object with --json.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "planner/bench_import.h"
#include "planner/calibrate.h"
#include "planner/data_dir.h"
#include "planner/json_util.h"
#include "planner/report_json.h"
#include "planner/sweep.h"
#include "tools/cmd_plan_common.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {
namespace {

using namespace epserve::planner;

// ---- plan layer -------------------------------------------------------------------------------

struct LayerFlags {
  CommonFlags common;
  LayoutFlags layout;
  int ep = 128, tp = 1, dp = 0, machines = 0;
  bool ignore_memory = false;
  std::string exchange = "published";
};

void RunLayer(const LayerFlags& f, CommandContext& ctx) {
  StatusOr<Loaded> l = Load(f.common);
  if (!l.ok()) return ReportError(ctx, l.status().message());
  l->workload.batch = f.common.batch;
  const int gpm =
      f.common.gpus_per_machine > 0 ? f.common.gpus_per_machine : l->hw.gpus_per_machine;
  if (f.dp > 0 && f.dp * f.tp != f.ep) {
    return ReportError(ctx, "EP " + std::to_string(f.ep) + " must equal DP x TP (" +
                                std::to_string(f.dp) + " x " + std::to_string(f.tp) + ")");
  }
  StatusOr<Layout> layout = ResolveLayout(f.layout, l->model, f.ep);
  if (!layout.ok()) return ReportError(ctx, layout.status().message());
  StatusOr<Deployment> d =
      MakeDeployment(l->model, {.ep = f.ep,
                                .tp = f.tp,
                                .gpus_per_machine = gpm,
                                .redundant_experts = layout->redundant_experts});
  if (!d.ok()) return ReportError(ctx, d.status().message());
  d->exchange = f.exchange == "epserve" ? ExchangeFormat::kEpserve : ExchangeFormat::kPublished;
  if (f.machines > 0 && f.machines != d->num_machines) {
    return ReportError(ctx, d->ToString() + ": --machines " + std::to_string(f.machines) +
                                " does not match (EP ranks fill machines of " +
                                std::to_string(gpm) + " GPUs)");
  }
  StatusOr<RoutingModel> routing = BuildRouting(*l, *d, *layout);
  if (!routing.ok()) return ReportError(ctx, routing.status().message());
  PlanContext pc{.hw = &l->hw, .model = &l->model, .eff = &l->eff, .routing = &*routing};
  StatusOr<StepEstimate> step = EstimateStep(
      pc, *d, l->workload, {.overlap = l->overlap, .require_memory_fit = !f.ignore_memory});
  if (!step.ok()) return ReportError(ctx, step.status().message());
  if (f.common.json) {
    nlohmann::json inputs = InputsJson(*l, f.common);
    inputs["expert_layout"] = routing->layout_source();
    Print({{"command", "plan layer"},
           {"inputs", inputs},
           {"deployment", DeploymentToJson(*d)},
           {"workload", WorkloadToJson(l->workload)},
           {"step", StepToJson(*step)}});
    return;
  }
  const LayerBreakdown& moe = step->moe_layer;
  std::printf("%s on %s: %s, %d requests per DP group, KV %d, query %d (acceptance %.2f)\n",
              l->model.name.c_str(), l->hw.name.c_str(), d->ToString().c_str(), l->workload.batch,
              l->workload.kv_len, l->workload.query_len, l->workload.acceptance_rate);
  std::printf("MoE layer (%s): %.0f us = compute %.0f + dispatch %.0f + combine %.0f visible\n",
              OverlapModeName(moe.mode), moe.total_us, moe.compute_us, moe.dispatch.visible_us,
              moe.combine.visible_us);
  PrintLayerTable(moe);
  std::printf("  dispatch: %.0f us on the wire, %.2f MB/rank; combine: %.0f us, %.2f MB/rank\n",
              moe.dispatch.transfer_us, moe.dispatch.bytes / 1e6, moe.combine.transfer_us,
              moe.combine.bytes / 1e6);
  std::printf(
      "  routing: %.2f experts touched per rank, %.1f tokens per expert, %.2f ranks per "
      "token\n",
      moe.touched_experts, moe.tokens_per_expert, moe.destinations_per_token);
  std::printf("  experts: %s, %d slots per rank; busiest rank's expert rows / mean rank's = %.3f\n",
              routing->layout_source().c_str(), d->SlotsPerRank(l->model),
              moe.rank_rows_max_over_mean);
  std::printf("Dense layer: %.0f us\n", step->dense_layer.total_us);
  std::printf("Step: %.2f ms (MoE %.2f, dense %.2f, MTP %.2f, LM head %.2f, overhead %.2f)\n",
              step->step_us / 1e3, step->moe_layers_us / 1e3, step->dense_layers_us / 1e3,
              step->mtp_us / 1e3, step->lm_head_us / 1e3, step->overhead_us / 1e3);
  std::printf("Speed: %.1f tokens/s per request; throughput %.0f tokens/s per machine\n",
              step->speed, step->throughput_per_machine);
  const MemoryFit& m = step->memory;
  std::printf(
      "Memory per GPU: weights %.1f GB, free for KV %.1f GB, %.0f MB per request: at most "
      "%d requests per DP group (%s)\n",
      m.weight_bytes / 1e9, m.free_for_kv_bytes / 1e9, m.kv_bytes_per_request / 1e6, m.max_batch,
      m.batch_fits ? "fits" : "DOES NOT FIT");
  for (const std::string& note : step->notes) std::printf("note: %s\n", note.c_str());
}

// ---- plan sweep / pick ------------------------------------------------------------------------

struct SweepFlags {
  CommonFlags common;
  std::string single_machine_gpu;
  std::string eps = "8,16,32,64,128", tps = "1,2,4,8", batches = "1-128";
  std::string redundant = "0";
  std::string placement;
  std::string csv;
  double min_speed = 0;
};

StatusOr<SweepResult> Sweep(const SweepFlags& f, const Loaded& l,
                            std::optional<HardwareSpec>& single) {
  SweepOptions options;
  ASSIGN_OR_RETURN(options.ep_values, ParseIntRanges(f.eps, "--ep"));
  ASSIGN_OR_RETURN(options.tp_values, ParseIntRanges(f.tps, "--tp"));
  ASSIGN_OR_RETURN(options.batches, ParseIntRanges(f.batches, "--batches"));
  ASSIGN_OR_RETURN(options.redundant_values,
                   ParseNonNegativeList(f.redundant, "--redundant-experts"));
  std::optional<ExpertPlacement> placement;
  if (!f.placement.empty()) {
    if (options.ep_values.size() != 1) {
      return Status::InvalidArgument("--placement " + f.placement +
                                     " fixes the ranks: give exactly one --ep value");
    }
    ASSIGN_OR_RETURN(Layout layout,
                     ResolveLayout({.placement = f.placement}, l.model, options.ep_values[0]));
    if (f.redundant == "0") options.redundant_values = {layout.redundant_experts};
    placement = std::move(layout.placement);
  }
  options.gpus_per_machine = f.common.gpus_per_machine;
  options.workload = l.workload;
  options.overlap = l.overlap;
  if (!f.single_machine_gpu.empty()) {
    ASSIGN_OR_RETURN(HardwareSpec spec, l.catalog.Find(f.single_machine_gpu));
    single = spec;
  }
  return RunSweep({.hw = &l.hw,
                   .single_machine_hw = single ? &*single : nullptr,
                   .model = &l.model,
                   .eff = &l.eff,
                   .trace = l.trace ? &*l.trace : nullptr,
                   .placement = placement ? &*placement : nullptr},
                  options);
}

Status WriteCsv(const SweepResult& result, const SweepFlags& f) {
  RETURN_IF_ERROR(CheckNotSameFile("--csv", f.csv, "--model/--hardware/--efficiency/--trace",
                                   InputFiles(f.common)));
  return WriteFileAtomically(f.csv, SweepToCsv(result));
}

// "EP144+32" with redundant experts, "EP128" without.
std::string EpLabel(const Deployment& d) {
  std::string label = "EP" + std::to_string(d.ep);
  if (d.redundant_experts > 0) label += "+" + std::to_string(d.redundant_experts);
  return label;
}

void PrintPoint(const char* label, const SweepPoint& p) {
  std::printf(
      "%-16s %-4s %-8s DP%-3d TP%d on %2d machine(s), batch %3d, %-16s %6.1f tokens/s, "
      "%8.0f tokens/s per machine\n",
      label, p.gpu.c_str(), EpLabel(p.deployment).c_str(), p.deployment.dp, p.deployment.tp,
      p.deployment.num_machines, p.batch, OverlapModeName(p.estimate.mode), p.estimate.speed,
      p.estimate.throughput_per_machine);
}

void RunSweepCommand(const SweepFlags& f, CommandContext& ctx, bool pick) {
  StatusOr<Loaded> l = Load(f.common);
  if (!l.ok()) return ReportError(ctx, l.status().message());
  std::optional<HardwareSpec> single;
  StatusOr<SweepResult> result = Sweep(f, *l, single);
  if (!result.ok()) return ReportError(ctx, result.status().message());
  if (!f.csv.empty()) {
    Status st = WriteCsv(*result, f);
    if (!st.ok()) return ReportError(ctx, st.message());
  }
  nlohmann::json inputs = InputsJson(*l, f.common);
  inputs["single_machine_gpu"] = single ? single->name : l->hw.name;
  inputs["workload"] = WorkloadToJson(l->workload);
  inputs["workload"].erase("batch");
  if (pick) {
    PickResult choice = PickDeployment(*result, f.min_speed);
    if (f.common.json) {
      Print({{"command", "plan pick"}, {"inputs", inputs}, {"pick", PickToJson(choice)}});
      return;
    }
    if (!choice.found) {
      std::printf("no swept deployment reaches %.1f tokens/s per request\n", f.min_speed);
      return;
    }
    std::printf("at >= %.1f tokens/s per request:\n", f.min_speed);
    PrintPoint("cheapest", choice.cheapest);
    PrintPoint("best throughput", choice.best_throughput);
    for (const SweepPoint& p : choice.best_per_ep) PrintPoint("best of its EP", p);
    return;
  }
  if (f.common.json) {
    nlohmann::json out = SweepToJson(*result);
    out["command"] = "plan sweep";
    out["inputs"] = inputs;
    Print(out);
    return;
  }
  // Compact view of the frontiers: best throughput per machine at each speed target, per EP
  // (and redundant count).
  std::vector<std::pair<int, int>> eps;
  for (const SweepPoint& p : result->points) {
    const std::pair<int, int> key{p.deployment.ep, p.deployment.redundant_experts};
    if (std::find(eps.begin(), eps.end(), key) == eps.end()) eps.push_back(key);
  }
  std::printf(
      "%zu points (%zu skipped; --json or --csv for all). Best tokens/s per machine at\n"
      ">= the output speed per request, per EP (Pareto frontiers):\n",
      result->points.size(), result->skipped.size());
  for (const std::string& why : result->skipped) {
    if (why.find("expert slots") != std::string::npos ||
        why.find("routed experts") != std::string::npos) {
      std::printf("skipped: %s\n", why.c_str());
    }
  }
  std::printf("%12s", "tokens/s >=");
  for (const auto& [ep, redundant] : eps) {
    std::printf("  %22s", EpLabel(Deployment{.ep = ep, .redundant_experts = redundant}).c_str());
  }
  std::printf("\n");
  for (double speed : {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150}) {
    std::printf("%12.0f", speed);
    for (const auto& [ep, redundant] : eps) {
      const SweepPoint* best = nullptr;
      for (const SweepPoint& p : result->points) {
        if (p.deployment.ep == ep && p.deployment.redundant_experts == redundant &&
            p.estimate.speed >= speed &&
            (!best || p.estimate.throughput_per_machine > best->estimate.throughput_per_machine)) {
          best = &p;
        }
      }
      if (best == nullptr) {
        std::printf("  %22s", "-");
      } else {
        char cell[64];
        std::snprintf(cell, sizeof(cell), "%.0f (TP%d b%d)", best->estimate.throughput_per_machine,
                      best->deployment.tp, best->batch);
        std::printf("  %22s", cell);
      }
    }
    std::printf("\n");
  }
}

// ---- plan roofline ----------------------------------------------------------------------------

struct RooflineFlags {
  CommonFlags common;
  std::string eps = "8,16,32,64,128", batches = "1,2,4,8,16,32,64,128";
};

void RunRoofline(const RooflineFlags& f, CommandContext& ctx) {
  StatusOr<Loaded> l = Load(f.common);
  if (!l.ok()) return ReportError(ctx, l.status().message());
  StatusOr<std::vector<int>> eps = ParseIntRanges(f.eps, "--ep");
  StatusOr<std::vector<int>> batches = ParseIntRanges(f.batches, "--batches");
  if (!eps.ok() || !batches.ok()) {
    return ReportError(ctx, (!eps.ok() ? eps.status() : batches.status()).message());
  }
  nlohmann::json points = nlohmann::json::array();
  for (int ep : *eps) {
    StatusOr<Deployment> d = MakeDeployment(l->model, ep, 1, l->hw.gpus_per_machine);
    if (!d.ok()) return ReportError(ctx, d.status().message());
    StatusOr<RoutingModel> routing = RoutingModel::Uniform(l->model, ep, d->RanksPerMachine());
    if (!routing.ok()) return ReportError(ctx, routing.status().message());
    PlanContext pc{.hw = &l->hw, .model = &l->model, .eff = &l->eff, .routing = &*routing};
    for (int batch : *batches) {
      Workload w = l->workload;
      w.batch = batch;
      StatusOr<LayerBreakdown> layer = ModelMoeLayer(pc, *d, w, OverlapMode::kNone);
      if (!layer.ok()) return ReportError(ctx, layer.status().message());
      for (const KernelTime& k : layer->kernels) {
        if (k.kind != KernelKind::kGroupGemm && k.name != "o_proj" && k.name != "qkv_a_proj" &&
            k.name != "q_b_proj") {
          continue;
        }
        nlohmann::json p = KernelCostToJson(k.cost);
        p["kernel"] = k.name;
        p["kind"] = KernelKindName(k.kind);
        p["ep"] = ep;
        p["batch"] = batch;
        p["groups"] = k.kind == KernelKind::kGroupGemm ? layer->touched_experts : 1.0;
        p["m"] = k.kind == KernelKind::kGroupGemm ? layer->tokens_per_expert
                                                  : static_cast<double>(batch) * w.query_len;
        points.push_back(std::move(p));
      }
    }
  }
  const double peak = l->hw.PeakFlopsPerSecond(l->model.LinearPrecision()) / 1e12;
  nlohmann::json roofs = {{"peak_tflops", peak},
                          {"bandwidth_tbs", l->hw.memory_bandwidth_tbs},
                          {"group_gemm_compute", l->eff.group_gemm.compute},
                          {"group_gemm_memory", l->eff.group_gemm.memory},
                          {"gemm_compute", l->eff.gemm.compute},
                          {"gemm_memory", l->eff.gemm.memory}};
  if (f.common.json) {
    Print({{"command", "plan roofline"},
           {"inputs", InputsJson(*l, f.common)},
           {"roofs", roofs},
           {"points", points}});
    return;
  }
  std::printf("%s roofs: %.0f TFLOP/s, %.2f TB/s (ridge %.0f FLOP/B)\n", l->hw.name.c_str(), peak,
              l->hw.memory_bandwidth_tbs, peak / l->hw.memory_bandwidth_tbs);
  std::printf("%-20s %5s %6s %8s %9s %9s %9s\n", "kernel", "EP", "batch", "m", "FLOP/B", "TFLOP/s",
              "time us");
  for (const nlohmann::json& p : points) {
    std::printf("%-20s %5d %6d %8.1f %9.1f %9.1f %9.1f\n", p["kernel"].get<std::string>().c_str(),
                p["ep"].get<int>(), p["batch"].get<int>(), p["m"].get<double>(),
                p["intensity"].get<double>(), p["tflops"].get<double>(),
                p["time_us"].get<double>());
  }
}

// ---- plan calibrate ---------------------------------------------------------------------------

struct CalibrateFlags {
  CommonFlags common;
  std::string measured, out;
};

void RunCalibrate(const CalibrateFlags& f, CommandContext& ctx) {
  std::vector<std::string> inputs = InputFiles(f.common);
  inputs.push_back(f.measured);
  Status same = CheckNotSameFile("--out", f.out,
                                 "--model/--hardware/--efficiency/--trace/--measured", inputs);
  if (same.ok()) same = CheckWritable("--out", f.out);
  if (!same.ok()) return ReportError(ctx, same.message());
  StatusOr<Loaded> l = Load(f.common);
  if (!l.ok()) return ReportError(ctx, l.status().message());
  StatusOr<std::string> text = planner::ReadTextFile(f.measured);
  if (!text.ok()) return ReportError(ctx, text.status().message());
  StatusOr<std::vector<MeasuredKernel>> samples = ParseMeasuredCsv(*text);
  if (!samples.ok()) return ReportError(ctx, f.measured + ": " + samples.status().message());
  StatusOr<CalibrationResult> fit = Calibrate(l->hw, l->eff, *samples);
  if (!fit.ok()) return ReportError(ctx, f.measured + ": " + fit.status().message());
  if (!f.out.empty()) {
    Status st = WriteFileAtomically(f.out, EfficiencyToJson(fit->factors).dump(2) + "\n");
    if (!st.ok()) return ReportError(ctx, st.message());
  }
  if (f.common.json) {
    nlohmann::json report = CalibrationToJson(*fit);
    report["command"] = "plan calibrate";
    report["inputs"] = {{"gpu", l->hw.name}, {"measured", f.measured}, {"out", f.out}};
    Print(report);
    return;
  }
  std::printf("%-14s %7s %12s %12s  %s\n", "family", "samples", "rms before", "rms after",
              "fitted / kept");
  for (const FamilyFit& fam : fit->families) {
    std::string fitted, kept;
    for (const std::string& s : fam.fitted) fitted += s + " ";
    for (const std::string& s : fam.kept) kept += s + " ";
    std::printf("%-14s %7d %11.1f%% %11.1f%%  %s/ %s\n", fam.family.c_str(), fam.samples,
                100 * fam.rms_log_error_before, 100 * fam.rms_log_error_after, fitted.c_str(),
                kept.c_str());
  }
  if (!f.out.empty()) std::printf("wrote %s\n", f.out.c_str());
}

// ---- plan import-bench ------------------------------------------------------------------------

struct ImportFlags {
  std::vector<std::string> kernels;
  std::string csv, hardware_out, name = "cpu";
  double memory_gb = 0;
  int ranks_per_machine = 1;
  bool json = false;
};

// Physical memory of this machine in decimal GB (0 when the OS does not say).
double MachineMemoryGb() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * page / 1e9 : 0;
}

Status RunImport(const ImportFlags& f) {
  RETURN_IF_ERROR(CheckNotSameFile("--csv", f.csv, "--kernels", f.kernels));
  RETURN_IF_ERROR(CheckNotSameFile("--hardware-out", f.hardware_out, "--kernels", f.kernels));
  RETURN_IF_ERROR(CheckNotSameFile("--hardware-out", f.hardware_out, "--csv", {f.csv}));
  RETURN_IF_ERROR(CheckWritable("--csv", f.csv));
  RETURN_IF_ERROR(CheckWritable("--hardware-out", f.hardware_out));
  std::vector<nlohmann::json> runs;
  for (const std::string& path : f.kernels) {
    ASSIGN_OR_RETURN(nlohmann::json run, ReadJsonFile(path));
    runs.push_back(std::move(run));
  }
  BenchImportOptions options{.name = f.name,
                             .memory_gb = f.memory_gb > 0 ? f.memory_gb : MachineMemoryGb(),
                             .ranks_per_machine = f.ranks_per_machine};
  ASSIGN_OR_RETURN(BenchImport imported, ImportBenchKernels(runs, options));
  std::string sources;
  for (const std::string& path : f.kernels) sources += (sources.empty() ? "" : ", ") + path;
  const std::string csv =
      MeasuredCsvText(imported.samples,
                      "epserve plan import-bench from `epserve bench kernels --json`: " + sources +
                          "\nmachine: " + imported.hardware.description);
  const nlohmann::json catalog = {
      {"_comment", "written by epserve plan import-bench"},
      {"gpus", nlohmann::json::array({HardwareSpecToJson(imported.hardware)})}};
  if (!f.csv.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(f.csv, csv));
  }
  if (!f.hardware_out.empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(f.hardware_out, catalog.dump(2) + "\n"));
  }
  if (f.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const MeasuredKernel& s : imported.samples) {
      rows.push_back({{"kernel", s.kernel}, {"shape", s.shape}, {"time_us", s.time_us}});
    }
    Print({{"command", "plan import-bench"},
           {"inputs", {{"kernels", f.kernels}, {"csv", f.csv}, {"hardware_out", f.hardware_out}}},
           {"hardware", HardwareSpecToJson(imported.hardware)},
           {"samples", rows},
           {"skipped", imported.skipped}});
    return Status::Ok();
  }
  if (f.csv.empty()) std::printf("%s", csv.c_str());
  const HardwareSpec& hw = imported.hardware;
  std::fprintf(stderr,
               "%s: memory roof %.2f GB/s, compute roof %.1f GFLOP/s, %.1f GB, %zu samples, "
               "%zu skipped\n",
               hw.name.c_str(), hw.memory_bandwidth_tbs * 1e3, hw.fp8_tflops * 1e3, hw.memory_gb,
               imported.samples.size(), imported.skipped.size());
  for (const std::string& why : imported.skipped)
    std::fprintf(stderr, "skipped: %s\n", why.c_str());
  return Status::Ok();
}

}  // namespace

void RegisterPlanCommand(CLI::App& app, CommandContext& ctx) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Deployment planner: roofline model of DeepSeek-V3-family decode on GPU clusters\n"
      "(docs/planner.md). Inputs are data: --hardware catalog, --efficiency factors, --model.");
  plan->require_subcommand(1);

  auto lf = std::make_shared<LayerFlags>();
  CLI::App* layer = plan->add_subcommand("layer",
                                         "per-kernel breakdown of one MoE layer, the "
                                         "decode step and the memory fit");
  AddCommonOptions(layer, &lf->common, WorkloadFlags::kDecode);
  AddLayoutOptions(layer, &lf->layout);
  layer->add_option("--ep", lf->ep, "expert-parallel ranks (GPUs)")
      ->check(AtLeast(1))
      ->capture_default_str();
  layer->add_option("--tp", lf->tp, "GPUs per DP group")->check(AtLeast(1))->capture_default_str();
  layer->add_option("--dp", lf->dp, "DP groups (default EP / TP)")->check(AtLeast(1));
  layer
      ->add_option("--exchange", lf->exchange,
                   "dispatch/combine rows: published (FP8 out, one BF16 row per token and rank "
                   "back) or epserve (FP8 + expert slots out, one f32 row per token and expert "
                   "back: what the CPU engine sends)")
      ->check(CLI::IsMember({"published", "epserve"}))
      ->capture_default_str();
  layer->add_option("--machines", lf->machines, "machines (default EP / GPUs per machine)")
      ->check(AtLeast(1));
  layer->add_option("--batch", lf->common.batch, "requests per DP group")
      ->check(AtLeast(1))
      ->capture_default_str();
  layer->add_flag("--ignore-memory", lf->ignore_memory,
                  "model the layer even if weights or KV do not fit");
  layer->callback([lf, &ctx] { RunLayer(*lf, ctx); });

  for (bool pick : {false, true}) {
    auto sf = std::make_shared<SweepFlags>();
    CLI::App* cmd =
        pick ? plan->add_subcommand("pick",
                                    "cheapest deployment meeting --min-speed, and the "
                                    "best throughput per machine at that speed")
             : plan->add_subcommand("sweep", "EP x TP x batch sweep and Pareto frontier per EP");
    AddCommonOptions(cmd, &sf->common, WorkloadFlags::kDecode);
    cmd->add_option("--single-machine-gpu", sf->single_machine_gpu,
                    "GPU for deployments that fit in one machine (the write-up: H200)");
    cmd->add_option("--ep", sf->eps, "EP values: list and A-B ranges")->capture_default_str();
    cmd->add_option("--tp", sf->tps, "TP values")->capture_default_str();
    cmd->add_option("--batches", sf->batches, "requests per DP group")->capture_default_str();
    cmd->add_option("--redundant-experts", sf->redundant,
                    "redundant expert slots, a list: each EP is swept with every value R for "
                    "which (experts + R) % EP == 0 (e.g. --ep 8,16,32,64,72,128,144,256 "
                    "--redundant-experts 0,32); the other pairs are skipped, with the reason")
        ->capture_default_str();
    cmd->add_option("--placement", sf->placement,
                    "`epserve place` output fixing every rank's experts (one --ep value, its "
                    "rank count)");
    if (pick) {
      cmd->add_option("--min-speed", sf->min_speed, "output tokens/s per request")
          ->check(PositiveReal())
          ->required();
    } else {
      cmd->add_option("--csv", sf->csv, "also write every point to this CSV file");
    }
    cmd->callback([sf, &ctx, pick] { RunSweepCommand(*sf, ctx, pick); });
  }

  auto rf = std::make_shared<RooflineFlags>();
  CLI::App* roofline = plan->add_subcommand(
      "roofline", "modeled GroupGEMM and GEMM points (TP1, full batch) against the roofs");
  AddCommonOptions(roofline, &rf->common, WorkloadFlags::kDecode);
  roofline->add_option("--ep", rf->eps, "EP values")->capture_default_str();
  roofline->add_option("--batches", rf->batches, "requests per GPU")->capture_default_str();
  roofline->callback([rf, &ctx] { RunRoofline(*rf, ctx); });

  auto cf = std::make_shared<CalibrateFlags>();
  CLI::App* calibrate = plan->add_subcommand(
      "calibrate", "fit efficiency factors to measured kernel times (CSV: kernel,shape,time_us)");
  AddCommonOptions(calibrate, &cf->common, WorkloadFlags::kNone);
  calibrate->add_option("--measured", cf->measured, "CSV of measured kernel times")->required();
  calibrate->add_option("--out", cf->out, "write the fitted efficiency JSON here");
  calibrate->callback([cf, &ctx] { RunCalibrate(*cf, ctx); });

  auto inf = std::make_shared<ImportFlags>();
  CLI::App* import = plan->add_subcommand(
      "import-bench",
      "turn `epserve bench kernels --json` runs into a calibration CSV and a hardware catalog\n"
      "entry for this machine (the CPU engine as a planner target; docs/planner.md)");
  import->add_option("--kernels", inf->kernels, "`bench kernels --json` output (repeatable)")
      ->required();
  import->add_option("--csv", inf->csv, "write the calibration CSV here (default: stdout)");
  import->add_option("--hardware-out", inf->hardware_out, "write a one-entry hardware catalog");
  import->add_option("--name", inf->name, "catalog name of the machine")->capture_default_str();
  import->add_option("--memory-gb", inf->memory_gb, "memory capacity (default: this machine's)")
      ->check(PositiveReal());
  import->add_option("--ranks-per-machine", inf->ranks_per_machine, "engine ranks per machine")
      ->check(IntRange(1, 4096))
      ->capture_default_str();
  import->add_flag("--json", inf->json, "print one JSON object");
  import->callback([inf, &ctx] {
    Status st = RunImport(*inf);
  if (!st.ok()) ReportError(ctx, st.message());
});

AddPlanPrefillCommand(plan, ctx);
AddPlanDisaggCommand(plan, ctx);
}  // namespace epserve::tools

}  // namespace epserve::tools
