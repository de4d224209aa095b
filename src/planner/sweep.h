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
  std::vector<int> batches = AllBatches(128);  // requests per DP group
  int gpus_per_machine = 0;                    // 0: the GPU's own
  Workload workload;                           // batch is overwritten by each point
  std::optional<OverlapMode> overlap;          // nullopt: fastest mode per point
};

// Inputs of a sweep; not owned. `single_machine_hw`, when set, prices deployments that fit in
// one machine (the write-up ran EP8 on one H200 machine and EP16-EP128 on H100 machines).
// `trace`, when set, replaces uniform routing.
struct SweepInputs {
  const HardwareSpec* hw = nullptr;
  const HardwareSpec* single_machine_hw = nullptr;
  const ModelSpec* model = nullptr;
  const EfficiencyFactors* eff = nullptr;
  const RoutingTrace* trace = nullptr;
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
  std::vector<std::string> skipped;  // why each excluded EP/TP/batch was left out
};

StatusOr<SweepResult> RunSweep(const SweepInputs& inputs, const SweepOptions& options);

// Points of `points` not dominated in (speed, throughput per machine), fastest first.
std::vector<SweepPoint> ParetoFrontier(const std::vector<SweepPoint>& points);
// The best throughput per machine among `points` with speed >= min_speed (0 when none).
double ThroughputAtSpeed(const std::vector<SweepPoint>& points, double min_speed);
// Points of one EP.
std::vector<SweepPoint> PointsWithEp(const SweepResult& result, int ep);

struct PickResult {
  bool found = false;
  double min_speed = 0;
  SweepPoint cheapest;                  // fewest GPUs meeting the speed, then best throughput
  SweepPoint best_throughput;           // best throughput per machine meeting the speed
  std::vector<SweepPoint> best_per_ep;  // best throughput per machine for each EP that meets it
};
PickResult PickDeployment(const SweepResult& result, double min_speed);

}  // namespace epserve::planner
