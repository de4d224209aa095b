// `epserve bench prefill`: the prompt-processing rate of one long prompt, measured as
// llama-bench measures `pp512` (so the two can stand side by side, docs/benchmarks.md): one
// untimed warm-up prefill, then `repeats` timed ones into an emptied cache, each reported. The
// warm-up matters: the first prefill of a process also grows the model's work buffers and
// touches their pages for the first time, which on this project's bench model costs about as
// much as the prefill itself. A benchmark: it reports, never asserts.
#pragma once

#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "runtime/loaded_model.h"

namespace epserve {

struct PrefillBenchOptions {
  int tokens = 512;     // prompt length
  int step_tokens = 0;  // tokens per forward step (0: the whole prompt in one step)
  int repeats = 3;      // timed prefills, after one untimed warm-up
  kernels::Compute compute = kernels::Compute::kExact;
};

struct PrefillBenchResult {
  std::vector<double> seconds;  // each timed prefill
  double mean_tokens_per_s = 0;
  double stddev_tokens_per_s = 0;  // over the runs' tokens/s (sample standard deviation)
  StepTimes phase_ms;              // per prefill, mean over the timed runs (model.h)
  double matmul_flops = 0;         // multiply-adds x 2 of every projection of one prefill
};

StatusOr<PrefillBenchResult> RunPrefillBench(const LoadedModel& model, ThreadPool& pool,
                                             const PrefillBenchOptions& options);

}  // namespace epserve
