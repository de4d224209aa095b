// GPU hardware specs for the deployment planner, read from a JSON catalog the user can extend
// (data/planner/hardware.json; format in docs/planner.md).
// Thread safety: plain values; a const HardwareCatalog may be shared between threads.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::planner {

// Numeric precision a kernel computes in; selects the compute roof.
enum class Precision { kFp8, kBf16 };

// One GPU model. Bandwidths are per GPU and per direction; sizes are decimal (1 GB = 1e9 B).
struct HardwareSpec {
  std::string name;
  std::string description;
  double fp8_tflops = 0;            // dense peak
  double bf16_tflops = 0;           // dense peak
  double memory_gb = 0;             // HBM capacity
  double memory_bandwidth_tbs = 0;  // HBM bandwidth
  double nvlink_gbs = 0;            // inside a machine
  double nvlink_latency_us = 0;
  double infiniband_gbs = 0;  // across machines, one NIC per GPU
  double infiniband_latency_us = 0;
  int gpus_per_machine = 0;

  // Returns InvalidArgument naming the first missing or non-positive field.
  Status Validate() const;

  double PeakFlopsPerSecond(Precision precision) const {
    return (precision == Precision::kFp8 ? fp8_tflops : bf16_tflops) * 1e12;
  }
  double MemoryBytes() const { return memory_gb * 1e9; }
  double MemoryBytesPerSecond() const { return memory_bandwidth_tbs * 1e12; }
  double NvlinkBytesPerSecond() const { return nvlink_gbs * 1e9; }
  double InfinibandBytesPerSecond() const { return infiniband_gbs * 1e9; }
};

StatusOr<HardwareSpec> HardwareSpecFromJson(const nlohmann::json& json);
nlohmann::json HardwareSpecToJson(const HardwareSpec& spec);

// An ordered list of specs with unique names.
class HardwareCatalog {
 public:
  // Parses {"gpus": [ {...}, ... ]}; every entry is validated.
  static StatusOr<HardwareCatalog> FromJson(const nlohmann::json& json);
  static StatusOr<HardwareCatalog> LoadFile(const std::string& path);

  // Case-insensitive lookup; NotFound lists the known names.
  StatusOr<HardwareSpec> Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  const std::vector<HardwareSpec>& specs() const { return specs_; }

 private:
  std::vector<HardwareSpec> specs_;
};

}  // namespace epserve::planner
