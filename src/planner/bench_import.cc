#include "planner/bench_import.h"

#include <algorithm>
#include <cstdio>

#include "planner/json_util.h"

namespace epserve::planner {
namespace {

std::string Num(double value) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

MeasuredKernel Sample(const std::string& kernel, std::string shape, double time_us) {
  MeasuredKernel s;
  s.kernel = kernel;
  s.time_us = time_us;
  // Same key=value split as ParseMeasuredCsv, so an imported sample equals its CSV round trip.
  std::string token;
  for (char c : shape + ";") {
    if (c != ';') {
      token += c;
      continue;
    }
    const size_t eq = token.find('=');
    if (eq != std::string::npos) s.fields[token.substr(0, eq)] = token.substr(eq + 1);
    token.clear();
  }
  s.shape = std::move(shape);
  return s;
}

}  // namespace

StatusOr<BenchImport> ImportBenchKernels(const std::vector<nlohmann::json>& runs,
                                         const BenchImportOptions& options) {
  if (runs.empty()) return Status::InvalidArgument("no `bench kernels --json` run to import");
  BenchImport out;
  double read_gbps = 0, triad_gbps = 0, blas_gflops = 0, compute_gflops = 0;
  std::string simd;
  int threads = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const nlohmann::json& run = runs[r];
    const std::string where = "bench kernels run " + std::to_string(r + 1);
    if (!run.is_object() || !run.contains("rows") || !run["rows"].is_array()) {
      return Status::InvalidArgument(where + ": expected an object with a 'rows' array");
    }
    ASSIGN_OR_RETURN(double read, GetNumber(run, "read_bandwidth_gbps", where));
    ASSIGN_OR_RETURN(double triad, GetNumberOr(run, "triad_bandwidth_gbps", 0, where));
    ASSIGN_OR_RETURN(int run_threads, GetIntOr(run, "threads", 0, where));
    read_gbps = std::max(read_gbps, read);
    triad_gbps = std::max(triad_gbps, triad);
    threads = std::max(threads, run_threads);
    if (simd.empty()) simd = GetStringOr(run, "simd_target", "");
    for (size_t i = 0; i < run["rows"].size(); ++i) {
      const nlohmann::json& row = run["rows"][i];
      const std::string kernel = GetStringOr(row, "kernel", "");
      const std::string context = where + " row " + std::to_string(i + 1) + " (" + kernel + ")";
      ASSIGN_OR_RETURN(double seconds, GetNumber(row, "seconds", context));
      ASSIGN_OR_RETURN(double bytes, GetNumber(row, "bytes", context));
      ASSIGN_OR_RETURN(double flops, GetNumberOr(row, "flops", 0, context));
      ASSIGN_OR_RETURN(double blas, GetNumberOr(row, "blas_gflops", 0, context));
      if (!(seconds > 0) || !(bytes > 0) || flops < 0) {
        return Status::InvalidArgument(context + ": seconds and bytes must be > 0");
      }
      const std::string dtype = GetStringOr(row, "dtype", "");
      const std::string regime = GetStringOr(row, "regime", "memory");  // or "compute"
      const std::string totals = "flops=" + Num(flops) + ";bytes=" + Num(bytes);
      const double us = seconds * 1e6;
      blas_gflops = std::max(blas_gflops, blas);
      // Any row's achieved FLOP/s bounds the roof from below (the engine's FP8 kernels can
      // beat OpenBLAS on the dequantized weights).
      compute_gflops = std::max(compute_gflops, flops / seconds / 1e9);
      if (kernel == "matmul") {
        // The planner reads dtype=fp8 as FP8 and anything else as BF16; on the CPU both roofs
        // are the same measured FLOP/s, the key only documents the weight type.
        const std::string shape = totals + ";dtype=" + (dtype == "fp8" ? "fp8" : "bf16");
        out.samples.push_back(Sample("gemm", shape, us));
        if (regime == "memory") out.samples.push_back(Sample("bmm", shape, us));
      } else if (kernel == "grouped_mlp") {
        out.samples.push_back(
            Sample("group_gemm", totals + ";dtype=" + (dtype == "fp8" ? "fp8" : "bf16"), us));
      } else if (kernel == "mla_attention") {
        out.samples.push_back(Sample("attention", totals, us));
      } else if (kernel == "silu_mul_quant_fp8") {
        out.samples.push_back(Sample("elementwise", "bytes=" + Num(bytes), us));
      } else {
        out.skipped.push_back(kernel + " " + GetStringOr(row, "shape", "") +
                              ": no planner kernel family");
      }
    }
  }
  if (out.samples.empty()) {
    return Status::InvalidArgument("bench kernels runs hold no kernel the planner prices");
  }
  HardwareSpec& hw = out.hardware;
  hw.name = options.name;
  // The compute roof: the fastest of OpenBLAS sgemm on this machine and every row; without a
  // BLAS reference (a compute-bound run) the memory-bound rows say nothing about peak FLOP/s.
  const double peak_gflops = blas_gflops > 0 ? std::max(blas_gflops, compute_gflops) : 0;
  if (!(peak_gflops > 0)) {
    return Status::InvalidArgument(
        "bench kernels runs hold no OpenBLAS reference (blas_gflops of a compute-bound row): "
        "no compute roof for the machine");
  }
  hw.description = "this machine as `epserve bench kernels` measured it (" +
                   std::to_string(threads) + " threads" + (simd.empty() ? "" : ", " + simd) +
                   "): memory roof = streaming read, compute roof = OpenBLAS sgemm; ranks on one "
                   "machine exchange through shared memory (STREAM triad); infiniband: "
                   "placeholder, not measured";
  hw.fp8_tflops = peak_gflops / 1e3;
  hw.bf16_tflops = peak_gflops / 1e3;
  hw.memory_gb = options.memory_gb;
  hw.memory_bandwidth_tbs = read_gbps / 1e3;
  hw.nvlink_gbs = triad_gbps > 0 ? triad_gbps : read_gbps;
  hw.nvlink_latency_us = 1;
  hw.infiniband_gbs = 1.25;  // 10 GbE; only priced when EP spans machines
  hw.infiniband_latency_us = 20;
  hw.gpus_per_machine = options.ranks_per_machine;
  RETURN_IF_ERROR(hw.Validate());
  return out;
}

std::string MeasuredCsvText(const std::vector<MeasuredKernel>& samples,
                            const std::string& comment) {
  std::string text;
  size_t start = 0;
  while (!comment.empty() && start <= comment.size()) {
    size_t end = comment.find('\n', start);
    if (end == std::string::npos) end = comment.size();
    text += "# " + comment.substr(start, end - start) + "\n";
    start = end + 1;
  }
  text += "kernel,shape,time_us\n";
  for (const MeasuredKernel& s : samples) {
    text += s.kernel + "," + s.shape + "," + Num(s.time_us) + "\n";
  }
  return text;
}

}  // namespace epserve::planner
