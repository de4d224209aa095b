// Disaggregated serving plans (`epserve plan disagg`, docs/planner.md "Disaggregation"): a
// prefill pool and a decode pool, each some replicas of one deployment (GPU kind, EP/TP,
// redundant experts), that meet a time-to-first-token SLO and a time-per-output-token SLO at a
// request rate with the fewest machines; the KV cache moves from prefill to decode over
// InfiniBand. And the co-located alternative: the same machines doing both, where a prompt chunk
// in any DP group holds up every group's MoE layer (colocated.h).
// Thread safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/prefill_model.h"
#include "planner/step_model.h"

namespace epserve::planner {

// What the deployment must serve.
struct ServingTarget {
  int prompt_len = 1024;
  int output_len = 256;
  double rate = 1;  // requests per second (Poisson)
  double ttft_slo_ms = 1000;
  double tpot_slo_ms = 50;
  Status Validate() const;  // messages name the flags
};

// How decode runs (Workload's fields other than batch and KV length).
struct DecodeSettings {
  int query_len = 2;  // 1 + MTP draft tokens
  double acceptance_rate = 0.6;
  double kv_element_bytes = 2;
  std::optional<OverlapMode> overlap;  // nullopt: the fastest mode per point
};

// The search space.
struct PoolSearch {
  std::vector<const HardwareSpec*> gpus;  // GPU kinds for either pool
  std::vector<int> ep_values = {8, 16, 32, 64, 72, 128, 144, 256};
  std::vector<int> tp_values = {1, 2, 4, 8};
  std::vector<int> redundant_values = {0, 32};  // each EP is tried with those that split evenly
  int gpus_per_machine = 0;                     // 0: each GPU's own
  int max_replicas = 64;                        // per pool
  std::vector<int> prefill_chunks = {0};        // chunk budgets of the prefill pool (0: whole)
  std::vector<int> colocated_chunks = {512, 1024, 2048, 4096};
};

// What is planned; pointers not owned. `trace`, when set, replaces uniform routing.
struct DisaggProblem {
  const ModelSpec* model = nullptr;
  const EfficiencyFactors* decode_eff = nullptr;
  const EfficiencyFactors* prefill_eff = nullptr;  // the prefill pool's (and its KV transfer's)
  const RoutingTrace* trace = nullptr;
  ServingTarget target;
  DecodeSettings decode;
};

// One pool candidate: `replicas` copies of `deployment` on `hw`. `routing` is built for the
// deployment's EP, redundant experts and ranks per machine.
struct PoolCandidate {
  const HardwareSpec* hw = nullptr;
  const RoutingModel* routing = nullptr;
  Deployment deployment;
  int replicas = 1;
  int chunk_tokens = 0;  // prefill pool and co-located: prompt tokens per pass per DP group
  double link_gbs = 0;   // prefill pool: KV transfer bandwidth; 0: the GPU's InfiniBand
};

struct PrefillPool {
  std::string gpu;
  Deployment deployment;
  int replicas = 0;
  int chunk_tokens = 0;
  TtftEstimate ttft;               // its ttft_us includes the KV transfer
  double kv_transfer_us = 0;       // one prompt's latent cache to a decode GPU
  double kv_link_utilization = 0;  // of one prefill GPU's NIC by its group's transfers
  bool fits = false;               // weights and one prompt's KV fit
  bool meets = false;
  int Machines() const { return replicas * deployment.num_machines; }
};

struct DecodePool {
  std::string gpu;
  Deployment deployment;
  int replicas = 0;
  int batch = 0;  // requests per DP group (Little's law at the rate)
  StepEstimate step;
  double tpot_us = 0;  // step time / tokens per step
  bool fits = false;   // the batch's KV (prompt + output tokens each) fits
  bool meets = false;
  int Machines() const { return replicas * deployment.num_machines; }
};

struct ColocatedPool {
  std::string gpu;
  Deployment deployment;
  int replicas = 0;
  int chunk_tokens = 0;
  int batch = 0;              // decoding requests per DP group
  int busy_groups = 0;        // groups with a prompt chunk in a step that has one
  double decode_step_us = 0;  // a step with no prompt chunk anywhere
  double mixed_step_us = 0;   // mean step with chunks in busy_groups groups
  double mixed_fraction = 0;  // P(a step carries a chunk somewhere) = 1 - (1 - rho)^DP
  double utilization = 0;     // rho: share of a group's time spent on its prompts
  double tpot_us = 0;
  double ttft_us = 0;
  bool stable = false;
  bool fits = false;
  bool meets = false;
  int Machines() const { return replicas * deployment.num_machines; }
};

struct DisaggPlan {
  ServingTarget target;
  double kv_bytes_per_request = 0;  // latent cache of one prompt (MTP layers included)
  PrefillPool prefill;
  DecodePool decode;
  int machines = 0;
  int gpus = 0;
  // The co-located deployment of the same machine count that comes closest to the SLOs (the
  // largest SLO ratio lowest), when any fits; and the smallest co-located one that meets both,
  // searched up to 3x the machines.
  std::optional<ColocatedPool> colocated_same_size;
  std::optional<ColocatedPool> colocated_smallest;
};

// The cheapest pools: fewest machines, then fewest GPUs, then the lowest TTFT / TPOT. Errors
// say which SLO no searched pool meets and the best value found.
StatusOr<DisaggPlan> PlanDisagg(const DisaggProblem& problem, const PoolSearch& search);

// One candidate of each kind (PlanDisagg's building blocks, exposed for tests). A candidate that
// cannot serve (overloaded, out of memory) is returned with meets = false; errors are for
// inputs that are wrong.
StatusOr<PrefillPool> EvaluatePrefillPool(const DisaggProblem& problem, const PoolCandidate& c);
StatusOr<DecodePool> EvaluateDecodePool(const DisaggProblem& problem, const PoolCandidate& c);
// Decode and chunked prefill on the same ranks (colocated.cc): every DP group decodes its batch
// and, when it has a prompt, adds one chunk of it to its step.
StatusOr<ColocatedPool> EvaluateColocated(const DisaggProblem& problem, const PoolCandidate& c);

// Latent KV bytes of one prompt as the decode pool stores it (MTP layers included when decode
// drafts with them).
double KvBytesPerRequest(const ModelSpec& model, const ServingTarget& target,
                         const DecodeSettings& decode);
// Time to move them over `link_gbs` of InfiniBand with `eff.kv_transfer`.
double KvTransferUs(const EfficiencyFactors& eff, const HardwareSpec& hw, double link_gbs,
                    double bytes);

}  // namespace epserve::planner
