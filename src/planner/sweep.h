// The deployment sweep (`epserve plan sweep`): every EP x TP x batch point, its speed and
// throughput, the Pareto frontier per EP, and the pick for a speed target (`plan pick`).
// Thread safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/step_model.h"

namespace epserve::planner {

// {1, 2, ..., max_batch}.
std::vector<int> AllBatches(int max_batch);
// Parses "1-128", "1,2,4,8", "8,16-32": comma-separated positive integers and inclusive ranges.
// InvalidArgument names `what` and the bad item.
StatusOr<std::vector<int>> ParseIntRanges(const std::string& text, const std::string& what);

struct SweepOptions {
  std::vector<int> ep_values = {8, 16, 32, 64, 128};
  std::vector<int> tp_values = {1, 2, 4, 8};
  // Redundant expert slots: each EP is swept with every value for which (experts + R) % EP == 0
  // (EP144 and EP72 need 32 for DeepSeek-V3's 256 experts); the other pairs go to `skipped`.
  std::vector<int> redundant_values = {0};
  std::vector<int> batches = AllBatches(128);  // requests per DP group
  int gpus_per_machine = 0;                    // 0: the GPU's own
  Workload workload;                           // batch is overwritten by each point
  std::optional<OverlapMode> overlap;          // nullopt: fastest mode per point
};

// Inputs of a sweep; not owned. `single_machine_hw`, when set, prices deployments that fit in
// one machine (the write-up ran EP8 on one H200 machine and EP16-EP128 on H100 machines).
// `trace`, when set, replaces uniform routing; `placement`, when set, fixes the experts of every
// rank (its rank count must be the one EP swept, its slots fit the redundant count).
struct SweepInputs {
  const HardwareSpec* hw = nullptr;
  const HardwareSpec* single_machine_hw = nullptr;
  const ModelSpec* model = nullptr;
  const EfficiencyFactors* eff = nullptr;
  const RoutingTrace* trace = nullptr;
  const ExpertPlacement* placement = nullptr;
};

struct SweepPoint {
  std::string gpu;
  Deployment deployment;
  int batch = 0;
  StepEstimate estimate;
  bool on_frontier = false;  // on the Pareto frontier of its EP
};

struct SweepResult {
  std::vector<SweepPoint> points;    // fitting points only
  std::vector<std::string> skipped;  // why each excluded EP/redundant/TP/batch was left out
};

// InvalidArgument when no EP of the list splits the experts with any redundant count.
StatusOr<SweepResult> RunSweep(const SweepInputs& inputs, const SweepOptions& options);

// Points of `points` not dominated in (speed, throughput per machine), fastest first.
std::vector<SweepPoint> ParetoFrontier(const std::vector<SweepPoint>& points);
// The best throughput per machine among `points` with speed >= min_speed (0 when none).
double ThroughputAtSpeed(const std::vector<SweepPoint>& points, double min_speed);
// Points of one EP (any redundant count).
std::vector<SweepPoint> PointsWithEp(const SweepResult& result, int ep);

struct PickResult {
  bool found = false;
  double min_speed = 0;
  SweepPoint cheapest;         // fewest GPUs meeting the speed, then best throughput
  SweepPoint best_throughput;  // best throughput per machine meeting the speed
  // Best throughput per machine for each (EP, redundant experts) that meets it.
  std::vector<SweepPoint> best_per_ep;
};
PickResult PickDeployment(const SweepResult& result, double min_speed);

}  // namespace epserve::planner
