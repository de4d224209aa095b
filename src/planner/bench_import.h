// Turns the CPU engine's own kernel benchmark (`epserve bench kernels --json`, fields in
// docs/benchmarks.md) into the planner's inputs, so that the same roofline model predicts the CPU
// engine (docs/planner.md, "The CPU engine"):
//   - calibration samples (`kernel,shape,time_us` rows for `epserve plan calibrate`), one per
//     benchmark row, shapes given as flops/bytes totals exactly as the benchmark counted them;
//   - a hardware catalog entry for the machine the benchmark ran on: the streaming-read
//     bandwidth it measured as the memory roof, the fastest FLOP/s it measured (OpenBLAS sgemm,
//     or a row of the engine's own kernels when faster) as the compute roof.
// Mapping (the CPU engine's kernels onto the planner's families):
//   matmul              -> gemm, and its memory-bound rows also -> bmm (the engine's absorb BMMs
//                          are the same MatMul kernel called per head)
//   grouped_mlp         -> group_gemm (the whole expert MLP: gate, up, SiLU, down)
//   mla_attention       -> attention (f32 latent cache)
//   silu_mul_quant_fp8  -> elementwise
// Other kernels are reported as skipped, never guessed.
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/calibrate.h"
#include "planner/hardware.h"

namespace epserve::planner {

struct BenchImportOptions {
  std::string name = "cpu";  // catalog name of the machine
  double memory_gb = 0;      // capacity; REQUIRES > 0 (the CLI reads the machine's RAM)
  int ranks_per_machine = 1;  // engine ranks (processes) per machine
};

struct BenchImport {
  std::vector<MeasuredKernel> samples;  // calibration rows, in benchmark order
  HardwareSpec hardware;                // validated
  std::vector<std::string> skipped;     // "kernel shape: why" for rows with no planner family
};

// `runs`: one or more `bench kernels --json` objects of the same machine (e.g. one run per
// --decode-mib, so that the per-call overhead and the bandwidth share separate). The roofs are
// the best each run measured. InvalidArgument names the run, the row and the field.
StatusOr<BenchImport> ImportBenchKernels(const std::vector<nlohmann::json>& runs,
                                         const BenchImportOptions& options);

// The samples as a calibration CSV (header, then `kernel,shape,time_us`), `comment` first as
// '#' lines. ParseMeasuredCsv reads it back to the same samples.
std::string MeasuredCsvText(const std::vector<MeasuredKernel>& samples,
                            const std::string& comment);

}  // namespace epserve::planner
