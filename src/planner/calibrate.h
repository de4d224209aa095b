// Calibration (`epserve plan calibrate --measured FILE`): fits the efficiency factors of each
// kernel family to measured kernel times. Input: CSV rows `kernel,shape,time_us` (format in
// docs/planner.md), e.g. `gemm,m=256;k=7168;n=2112,16.7` or
// `dispatch,bytes=13800000;fabric=ib,593`. Each family present is fitted by minimizing the squared
// log error of time = overhead + max(flops/(compute*peak), bytes/(memory*bw)) (communication:
// overhead + latency + bytes/(eff*link bw)) with a coarse-to-fine grid; a factor no sample
// constrains keeps its prior value.
// Thread safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/efficiency.h"
#include "planner/hardware.h"

namespace epserve::planner {

struct MeasuredKernel {
  std::string kernel;  // gemm, group_gemm, bmm, attention, elementwise, dispatch, combine,
                       // tp_collective
  std::string shape;   // as written: key=value pairs separated by ';' or spaces
  std::map<std::string, std::string> fields;
  double time_us = 0;
};

// Parses the CSV (lines starting with # and a header line starting with "kernel" are skipped).
// Errors name the line and the field.
StatusOr<std::vector<MeasuredKernel>> ParseMeasuredCsv(const std::string& text);

// The time the roofline model predicts for one measured kernel's shape under `factors`.
StatusOr<double> ModelKernelUs(const HardwareSpec& hw, const EfficiencyFactors& factors,
                               const MeasuredKernel& sample);

struct CalibrationRow {
  std::string kernel;
  std::string shape;
  double measured_us = 0;
  double before_us = 0;  // with the prior factors
  double after_us = 0;   // with the fitted factors
};

struct FamilyFit {
  std::string family;
  int samples = 0;
  double rms_log_error_before = 0;  // sqrt(mean((ln model - ln measured)^2))
  double rms_log_error_after = 0;
  std::vector<std::string> fitted;  // factors the samples constrain
  std::vector<std::string> kept;    // factors left at their prior value
};

struct CalibrationResult {
  EfficiencyFactors factors;
  std::vector<CalibrationRow> rows;
  std::vector<FamilyFit> families;
};

StatusOr<CalibrationResult> Calibrate(const HardwareSpec& hw, const EfficiencyFactors& prior,
                                      const std::vector<MeasuredKernel>& samples);
nlohmann::json CalibrationToJson(const CalibrationResult& result);

}  // namespace epserve::planner
