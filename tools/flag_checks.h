// Range validators for numeric flags: every numeric flag of a command carries one, so a bad
// value is refused at parse time with one line naming the flag ("--top-p: must be a number in
// (0, 1], got 2") before anything is loaded or allocated.
//
// CLI::Range is not enough: it compares with < and >, which are false for NaN, so "nan" passes
// it. These validators convert the text themselves and reject NaN and infinities first.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>

#include "kernels/matmul.h"
#include "kernels/matmul_fast.h"
#include "kernels/matmul_i8.h"
#include "model/weights.h"

namespace epserve::tools {

// An integer in [lo, hi].
inline CLI::Validator IntRange(int64_t lo, int64_t hi) {
  const std::string want = hi == std::numeric_limits<int64_t>::max()
                               ? ">= " + std::to_string(lo)
                               : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, want](std::string& in) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(in, v) || v < lo || v > hi)
          return "must be an integer " + want + ", got " + in;
        return {};
      },
      "INT " + want);
}
inline CLI::Validator AtLeast(int64_t lo) {
  return IntRange(lo, std::numeric_limits<int64_t>::max());
}

enum class LowerEnd { kClosed, kOpen };

// A finite number in [lo, hi] ((lo, hi] with LowerEnd::kOpen); hi may be +infinity (no bound).
inline CLI::Validator RealRange(double lo, double hi, LowerEnd lower = LowerEnd::kClosed) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  const bool open = lower == LowerEnd::kOpen;
  const std::string want =
      std::isinf(hi) ? std::string(open ? "> " : ">= ") + num(lo)
                     : std::string("in ") + (open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
  return CLI::Validator(
      [lo, hi, open, want](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v) || !std::isfinite(v) || v < lo || v > hi ||
            (open && v == lo))
          return "must be a finite number " + want + ", got " + in;
        return {};
      },
      "NUMBER " + want);
}
// A finite number > 0.
inline CLI::Validator PositiveReal() {
  return RealRange(0, std::numeric_limits<double>::infinity(), LowerEnd::kOpen);
}
// A finite number >= 0.
inline CLI::Validator NonNegativeReal() {
  return RealRange(0, std::numeric_limits<double>::infinity());
}

// The most worker threads a --threads flag accepts: 64 per core of this machine. More than
// that only costs memory and start-up time, and far more fails thread creation.
inline int MaxThreads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return 64 * static_cast<int>(cores > 0 ? cores : 1);
}
// --threads N: 0 (the default, from the machine) to MaxThreads().
inline CLI::Validator ThreadCount() { return IntRange(0, MaxThreads()); }

// --compute exact|fast (kernels::Compute; docs/kernels.md, "Compute modes").
inline CLI::Option* AddComputeFlag(CLI::App* cmd, std::string* value) {
  return cmd
      ->add_option("--compute", *value,
                   "exact: f32 products of the exact weights (what the reference tests check at "
                   "1e-3); fast: activations and weights rounded to bfloat16 and multiplied on the "
                   "CPU's BF16 instructions (AMX tiles, else AVX512-BF16 dot products), f32 sums "
                   "(runs exact where the CPU has neither)")
      ->check(CLI::IsMember({"exact", "fast"}))
      ->capture_default_str();
}
inline kernels::Compute ComputeFromFlag(const std::string& value) {
  return value == "fast" ? kernels::Compute::kFast : kernels::Compute::kExact;
}
// --requant none|int8 (LoadOptions::Requant; docs/kernels.md, "Int8 weights").
inline CLI::Option* AddRequantFlag(CLI::App* cmd, std::string* value) {
  return cmd
      ->add_option("--requant", *value,
                   "int8: requantize the projections (all but kv_b_proj and the router) to int8 "
                   "per row and 128-column block at load, and multiply them with int8 "
                   "activations on the CPU's 8-bit dot products (AVX512-VNNI; elsewhere a slow "
                   "scalar kernel); none: the checkpoint's weights, multiplied as --compute says")
      ->check(CLI::IsMember({"none", "int8"}))
      ->capture_default_str();
}
inline LoadOptions::Requant RequantFromFlag(const std::string& value) {
  return value == "int8" ? LoadOptions::Requant::kInt8 : LoadOptions::Requant::kNone;
}
// What --requant VALUE runs on this CPU, for the commands' output.
inline std::string RequantNote(const std::string& value) {
  if (value != "int8") return value;
  return value + (kernels::I8MatMulAccelerated() ? " (avx512-vnni kernel)"
                                                 : " (no AVX512-VNNI here: scalar kernel, slow)");
}
// What --compute VALUE runs on this CPU, for the commands' output: "exact",
// "fast (avx512-bf16 kernel)", or "fast (no AMX or AVX512-BF16 here: runs exact)".
inline std::string ComputeNote(const std::string& value) {
  if (value != "fast") return value;
  if (!kernels::FastMatMulAvailable()) return value + " (no AMX or AVX512-BF16 here: runs exact)";
  return value + " (" + kernels::FastKernelName(kernels::FastMatMulKernel()) + " kernel)";
}

}  // namespace epserve::tools
