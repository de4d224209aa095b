#include "planner/calibrate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "planner/csv.h"
#include "planner/roofline.h"

namespace epserve::planner {
namespace {

const char* const kRooflineFamilies[] = {"gemm", "group_gemm", "bmm", "attention", "elementwise"};
const char* const kCommFamilies[] = {"dispatch", "combine", "tp_collective"};

bool IsComm(const std::string& k) {
  return std::find(std::begin(kCommFamilies), std::end(kCommFamilies), k) !=
         std::end(kCommFamilies);
}

StatusOr<double> Field(const MeasuredKernel& s, const std::string& key, double fallback,
                       bool required) {
  auto it = s.fields.find(key);
  if (it == s.fields.end()) {
    if (required) {
      return Status::InvalidArgument(s.kernel + " '" + s.shape + "': missing '" + key + "'");
    }
    return fallback;
  }
  try {
    size_t used = 0;
    double value = std::stod(it->second, &used);
    if (used != it->second.size() || !(value >= 0)) throw std::invalid_argument("bad");
    return value;
  } catch (...) {
    return Status::InvalidArgument(s.kernel + " '" + s.shape + "': bad number for '" + key + "'");
  }
}

// A sample reduced to what its time depends on besides the factors.
struct Priced {
  double flops = 0;
  double bytes = 0;
  double peak = 0;       // FLOP/s (roofline) or 0
  double bandwidth = 0;  // HBM bytes/s (roofline) or link bytes/s (comm)
  double latency_s = 0;  // link latency (comm)
  bool infiniband = false;
};

StatusOr<Priced> Price(const HardwareSpec& hw, const MeasuredKernel& s) {
  Priced p;
  const bool roofline = s.kernel == "gemm" || s.kernel == "group_gemm" || s.kernel == "bmm" ||
                        s.kernel == "attention";
  if (roofline && s.fields.count("bytes") && !s.fields.count("m") && !s.fields.count("b")) {
    // Shape given as totals (e.g. converted from `epserve bench kernels --json` rows).
    ASSIGN_OR_RETURN(p.flops, Field(s, "flops", 0, false));
    ASSIGN_OR_RETURN(p.bytes, Field(s, "bytes", 0, true));
    auto dtype = s.fields.find("dtype");
    const bool fp8 = s.kernel != "attention" && (dtype == s.fields.end() || dtype->second == "fp8");
    p.peak = hw.PeakFlopsPerSecond(fp8 ? Precision::kFp8 : Precision::kBf16);
    p.bandwidth = hw.MemoryBytesPerSecond();
  } else if (s.kernel == "gemm" || s.kernel == "group_gemm" || s.kernel == "bmm") {
    ASSIGN_OR_RETURN(double g, Field(s, "g", 1, false));
    ASSIGN_OR_RETURN(double m, Field(s, "m", 0, true));
    ASSIGN_OR_RETURN(double k, Field(s, "k", 0, true));
    ASSIGN_OR_RETURN(double n, Field(s, "n", 0, true));
    auto dtype = s.fields.find("dtype");
    const bool bf16 = dtype != s.fields.end() && dtype->second == "bf16";
    if (dtype != s.fields.end() && dtype->second != "bf16" && dtype->second != "fp8") {
      return Status::InvalidArgument(s.kernel + " '" + s.shape + "': dtype must be fp8 or bf16");
    }
    KernelEfficiency unit;
    KernelCost cost = MatmulCost(hw, unit,
                                 {.groups = g,
                                  .m = m,
                                  .k = k,
                                  .n = n,
                                  .element_bytes = bf16 ? 2.0 : 1.0,
                                  .precision = bf16 ? Precision::kBf16 : Precision::kFp8});
    p.flops = cost.flops;
    p.bytes = cost.bytes;
    p.peak = hw.PeakFlopsPerSecond(bf16 ? Precision::kBf16 : Precision::kFp8);
    p.bandwidth = hw.MemoryBytesPerSecond();
  } else if (s.kernel == "attention") {
    AttentionShape shape;
    ASSIGN_OR_RETURN(shape.requests, Field(s, "b", 0, true));
    ASSIGN_OR_RETURN(shape.query_len, Field(s, "q", 1, false));
    ASSIGN_OR_RETURN(shape.kv_len, Field(s, "l", 0, true));
    ASSIGN_OR_RETURN(shape.heads, Field(s, "h", 0, true));
    ASSIGN_OR_RETURN(shape.latent_dim, Field(s, "latent", 512, false));
    ASSIGN_OR_RETURN(shape.rope_dim, Field(s, "rope", 64, false));
    KernelCost cost = AttentionCost(hw, KernelEfficiency{}, shape);
    p.flops = cost.flops;
    p.bytes = cost.bytes;
    p.peak = hw.PeakFlopsPerSecond(Precision::kBf16);
    p.bandwidth = hw.MemoryBytesPerSecond();
  } else if (s.kernel == "elementwise") {
    ASSIGN_OR_RETURN(p.bytes, Field(s, "bytes", 0, true));
    p.bandwidth = hw.MemoryBytesPerSecond();
  } else if (IsComm(s.kernel)) {
    ASSIGN_OR_RETURN(p.bytes, Field(s, "bytes", 0, true));
    auto fabric = s.fields.find("fabric");
    const std::string name = fabric == s.fields.end() ? "nvlink" : fabric->second;
    if (name != "nvlink" && name != "ib" && name != "infiniband") {
      return Status::InvalidArgument(s.kernel + " '" + s.shape + "': fabric must be nvlink or ib");
    }
    p.infiniband = name != "nvlink";
    p.bandwidth = p.infiniband ? hw.InfinibandBytesPerSecond() : hw.NvlinkBytesPerSecond();
    p.latency_s = (p.infiniband ? hw.infiniband_latency_us : hw.nvlink_latency_us) * 1e-6;
  } else {
    return Status::InvalidArgument("unknown kernel '" + s.kernel +
                                   "' (gemm, group_gemm, bmm, attention, elementwise, dispatch, "
                                   "combine, tp_collective)");
  }
  return p;
}

// Factor vector: {overhead_us, a, b} = {overhead, compute, memory} or {overhead, nvlink, ib}.
using Params = std::array<double, 3>;

double TimeUs(const Priced& p, bool comm, const Params& x) {
  if (comm) {
    return x[0] + (p.latency_s + p.bytes / ((p.infiniband ? x[2] : x[1]) * p.bandwidth)) * 1e6;
  }
  const double compute = p.peak > 0 ? p.flops / (x[1] * p.peak) : 0;
  return x[0] + std::max(compute, p.bytes / (x[2] * p.bandwidth)) * 1e6;
}

Params ToParams(const EfficiencyFactors& f, const std::string& family) {
  if (family == "dispatch")
    return {f.dispatch.overhead_us, f.dispatch.nvlink, f.dispatch.infiniband};
  if (family == "combine") return {f.combine.overhead_us, f.combine.nvlink, f.combine.infiniband};
  if (family == "tp_collective") {
    return {f.tp_collective.overhead_us, f.tp_collective.nvlink, f.tp_collective.infiniband};
  }
  const KernelEfficiency& k = family == "gemm"         ? f.gemm
                              : family == "group_gemm" ? f.group_gemm
                              : family == "bmm"        ? f.bmm
                              : family == "attention"  ? f.attention
                                                       : f.elementwise;
  return {k.overhead_us, k.compute, k.memory};
}

void FromParams(const Params& x, const std::string& family, const std::string& source,
                EfficiencyFactors& f) {
  auto set_comm = [&](CommEfficiency& c) {
    c.overhead_us = x[0];
    c.nvlink = x[1];
    c.infiniband = x[2];
    c.source = source;
  };
  auto set_kernel = [&](KernelEfficiency& k) {
    k.overhead_us = x[0];
    k.compute = x[1];
    k.memory = x[2];
    k.source = source;
  };
  if (family == "dispatch") return set_comm(f.dispatch);
  if (family == "combine") return set_comm(f.combine);
  if (family == "tp_collective") return set_comm(f.tp_collective);
  if (family == "gemm") return set_kernel(f.gemm);
  if (family == "group_gemm") return set_kernel(f.group_gemm);
  if (family == "bmm") return set_kernel(f.bmm);
  if (family == "attention") return set_kernel(f.attention);
  set_kernel(f.elementwise);
}

// Coarse-to-fine grid search of `loss` over [lo, hi] per coordinate; ties (flat directions)
// go to the point closest to `prior`, so unconstrained factors keep their prior value.
Params GridFit(const std::function<double(const Params&)>& loss, Params lo, Params hi,
               const Params& prior) {
  constexpr int kSteps = 24;
  constexpr int kRounds = 8;
  // Each round keeps kZoom grid steps either side of the best point. Overhead and bandwidth
  // trade off along a narrow valley: a 2-step window could lock onto a coarse-grid compromise
  // (e.g. 80 us of overhead instead of 5 for ms-long CPU kernels) and never reach the minimum.
  constexpr double kZoom = 4;
  // Distance from the prior, all three in log terms (overhead shifted by 1 us so 0 is allowed):
  // along a flat direction, e.g. one sample for overhead and bandwidth, the overhead stays near
  // its prior instead of absorbing milliseconds of a long kernel.
  auto distance = [&](const Params& x) {
    double d = std::fabs(std::log((x[0] + 1) / (prior[0] + 1)));
    for (int i = 1; i < 3; ++i) d += std::fabs(std::log(x[i] / prior[i]));
    return d;
  };
  Params best = prior;
  double best_loss = loss(prior);
  for (int round = 0; round < kRounds; ++round) {
    std::array<std::vector<double>, 3> grid;
    for (int i = 0; i < 3; ++i) {
      for (int s = 0; s < kSteps; ++s) {
        const double t = static_cast<double>(s) / (kSteps - 1);
        grid[i].push_back(i == 0 ? lo[0] + t * (hi[0] - lo[0])
                                 : lo[i] * std::pow(hi[i] / lo[i], t));
      }
      grid[i].push_back(std::clamp(prior[i], lo[i], hi[i]));
      grid[i].push_back(best[i]);
    }
    for (double a : grid[0]) {
      for (double b : grid[1]) {
        for (double c : grid[2]) {
          const Params x = {a, b, c};
          const double value = loss(x);
          const double tolerance = 1e-12 + 1e-9 * best_loss;
          if (value < best_loss - tolerance ||
              (value <= best_loss + tolerance && distance(x) < distance(best))) {
            best = x;
            best_loss = std::min(best_loss, value);
          }
        }
      }
    }
    // Zoom in around the best point (kZoom grid steps each side).
    for (int i = 0; i < 3; ++i) {
      if (i == 0) {
        const double step = kZoom * (hi[0] - lo[0]) / (kSteps - 1);
        const double new_lo = std::max(lo[0], best[0] - step);
        hi[0] = std::min(hi[0], best[0] + step);
        lo[0] = new_lo;
      } else {
        const double ratio = std::pow(hi[i] / lo[i], kZoom / (kSteps - 1));
        const double new_lo = std::max(lo[i], best[i] / ratio);
        hi[i] = std::min(hi[i], best[i] * ratio);
        lo[i] = new_lo;
      }
    }
  }
  return best;
}

}  // namespace

StatusOr<std::vector<MeasuredKernel>> ParseMeasuredCsv(const std::string& text) {
  std::vector<MeasuredKernel> samples;
  std::vector<std::string_view> lines = SplitLines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string where = "measured CSV line " + std::to_string(i + 1);
    if (lines[i].front() == '#') continue;
    ASSIGN_OR_RETURN(std::vector<std::string> fields, SplitCsvLine(lines[i]));
    if (samples.empty() && !fields.empty() && fields[0] == "kernel") continue;  // header
    if (fields.size() != 3) {
      return Status::InvalidArgument(where + ": expected kernel,shape,time_us");
    }
    MeasuredKernel s;
    s.kernel = fields[0];
    s.shape = fields[1];
    std::string token;
    auto flush = [&]() -> Status {
      if (token.empty()) return Status::Ok();
      size_t eq = token.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Status::InvalidArgument(where + ": shape item '" + token + "' is not key=value");
      }
      s.fields[token.substr(0, eq)] = token.substr(eq + 1);
      token.clear();
      return Status::Ok();
    };
    for (char c : s.shape) {
      if (c == ';' || c == ' ') {
        RETURN_IF_ERROR(flush());
      } else {
        token += c;
      }
    }
    RETURN_IF_ERROR(flush());
    try {
      size_t used = 0;
      s.time_us = std::stod(fields[2], &used);
      if (used != fields[2].size() || !(s.time_us > 0)) throw std::invalid_argument("bad");
    } catch (...) {
      return Status::InvalidArgument(where + ": time_us '" + fields[2] +
                                     "' is not a positive number");
    }
    samples.push_back(std::move(s));
  }
  if (samples.empty()) return Status::InvalidArgument("measured CSV has no samples");
  return samples;
}

StatusOr<double> ModelKernelUs(const HardwareSpec& hw, const EfficiencyFactors& factors,
                               const MeasuredKernel& sample) {
  ASSIGN_OR_RETURN(Priced p, Price(hw, sample));
  return TimeUs(p, IsComm(sample.kernel), ToParams(factors, sample.kernel));
}

StatusOr<CalibrationResult> Calibrate(const HardwareSpec& hw, const EfficiencyFactors& prior,
                                      const std::vector<MeasuredKernel>& samples) {
  RETURN_IF_ERROR(prior.Validate());
  std::vector<Priced> priced;
  for (const MeasuredKernel& s : samples) {
    ASSIGN_OR_RETURN(Priced p, Price(hw, s));
    priced.push_back(p);
  }
  CalibrationResult result;
  result.factors = prior;
  std::vector<std::string> families(std::begin(kRooflineFamilies), std::end(kRooflineFamilies));
  families.insert(families.end(), std::begin(kCommFamilies), std::end(kCommFamilies));
  for (const std::string& family : families) {
    std::vector<size_t> idx;
    double min_time = 1e300;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i].kernel == family) {
        idx.push_back(i);
        min_time = std::min(min_time, samples[i].time_us);
      }
    }
    if (idx.empty()) continue;
    const bool comm = IsComm(family);
    auto loss = [&](const Params& x) {
      double sum = 0;
      for (size_t i : idx) {
        const double e = std::log(TimeUs(priced[i], comm, x) / samples[i].time_us);
        sum += e * e;
      }
      return sum;
    };
    const Params start = ToParams(prior, family);
    const Params free_fit =
        GridFit(loss, {0, 0.005, 0.005}, {std::max(min_time, 1e-3), 1.0, 1.0}, start);
    // Occam: keep the prior overhead unless freeing it buys a real improvement. Samples that do
    // not separate overhead from bandwidth (one shape, or only long kernels measured with noise)
    // would otherwise let a coarse grid step park milliseconds in the overhead.
    const double overhead = std::min(start[0], std::max(min_time, 1e-3));
    const Params fixed_fit =
        GridFit(loss, {overhead, 0.005, 0.005}, {overhead, 1.0, 1.0}, start);
    const double free_loss = loss(free_fit), fixed_loss = loss(fixed_fit);
    const bool keep_overhead =
        fixed_loss <= free_loss + 1e-3 * static_cast<double>(idx.size()) * 1e-2 + 1e-12;
    const Params fitted = keep_overhead ? fixed_fit : free_fit;
    FromParams(fitted, family,
               "calibrated from " + std::to_string(idx.size()) + " measured " + family +
                   " kernels on " + hw.name,
               result.factors);
    FamilyFit fit{.family = family, .samples = static_cast<int>(idx.size())};
    fit.rms_log_error_before = std::sqrt(loss(start) / idx.size());
    fit.rms_log_error_after = std::sqrt(loss(fitted) / idx.size());
    const char* names[3] = {"overhead_us", comm ? "nvlink" : "compute",
                            comm ? "infiniband" : "memory"};
    for (int i = 0; i < 3; ++i) {
      // A factor is constrained when moving it by 10% changes the loss.
      Params up = fitted, down = fitted;
      up[i] = i == 0 ? fitted[0] + 0.1 * min_time : std::min(1.0, fitted[i] * 1.1);
      down[i] = i == 0 ? std::max(0.0, fitted[0] - 0.1 * min_time) : fitted[i] / 1.1;
      const double base = loss(fitted);
      const bool moves = std::fabs(loss(up) - base) > 1e-9 * (1 + base) ||
                         std::fabs(loss(down) - base) > 1e-9 * (1 + base);
      (moves && !(i == 0 && keep_overhead) ? fit.fitted : fit.kept).push_back(names[i]);
    }
    result.families.push_back(std::move(fit));
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const bool comm = IsComm(samples[i].kernel);
    result.rows.push_back(
        {.kernel = samples[i].kernel,
         .shape = samples[i].shape,
         .measured_us = samples[i].time_us,
         .before_us = TimeUs(priced[i], comm, ToParams(prior, samples[i].kernel)),
         .after_us = TimeUs(priced[i], comm, ToParams(result.factors, samples[i].kernel))});
  }
  RETURN_IF_ERROR(result.factors.Validate());
  return result;
}

nlohmann::json CalibrationToJson(const CalibrationResult& result) {
  nlohmann::json families = nlohmann::json::array();
  for (const FamilyFit& f : result.families) {
    families.push_back({{"family", f.family},
                        {"samples", f.samples},
                        {"rms_log_error_before", f.rms_log_error_before},
                        {"rms_log_error_after", f.rms_log_error_after},
                        {"fitted", f.fitted},
                        {"kept", f.kept}});
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const CalibrationRow& r : result.rows) {
    rows.push_back({{"kernel", r.kernel},
                    {"shape", r.shape},
                    {"measured_us", r.measured_us},
                    {"before_us", r.before_us},
                    {"after_us", r.after_us},
                    {"error_after", r.after_us / r.measured_us - 1}});
  }
  return {{"efficiency", EfficiencyToJson(result.factors)}, {"families", families}, {"rows", rows}};
}

}  // namespace epserve::planner
