// What the user deploys (machines, EP = DP x TP) and what it serves (SPEC §3).
// Thread safety: plain values.
#pragma once

#include <string>

#include "base/status.h"
#include "planner/hardware.h"
#include "planner/model_spec.h"

namespace epserve::planner {

// How a MoE layer overlaps communication with compute (SPEC §5).
enum class OverlapMode {
  kNone,             // dispatch, GroupGEMM, combine strictly in sequence
  kDispatchOverlap,  // shared expert runs between dispatch send and receive
  kMicroBatch,       // two half batches, 3 stages apart through the 5-stage layer
};
const char* OverlapModeName(OverlapMode mode);
// Accepts none|no-overlap, dispatch|dispatch-overlap, microbatch|micro-batch.
StatusOr<OverlapMode> ParseOverlapMode(const std::string& text);

// What the dispatch/combine rows carry (SPEC §4).
enum class ExchangeFormat {
  kPublished,  // the write-up's: FP8 rows out, one BF16 row per (token, rank) back, pre-summed
  kEpserve,    // epserve's: FP8 rows + top_k (expert id, weight) slots out, one f32 row per
               // (token, expert) pair back, so rounding is independent of the placement
};

struct Deployment {
  int num_machines = 1;
  int gpus_per_machine = 8;  // ranks per machine (one rank per GPU)
  int ep = 8;                // EP ranks = every GPU of the deployment
  int dp = 8;                // independent engine instances (DP groups)
  int tp = 1;                // GPUs per DP group (attention heads split over them)
  // Expert slots beyond one per routed expert, over all ranks: every rank holds
  // (n_routed_experts + redundant_experts) / EP slots (DeepSeek's prefill: EP32 with 32, 9 each).
  int redundant_experts = 0;
  ExchangeFormat exchange = ExchangeFormat::kPublished;

  int RanksPerMachine() const { return ep < gpus_per_machine ? ep : gpus_per_machine; }
  // Routed-expert slots (weight copies) per rank. REQUIRES: Validate(model).ok().
  int SlotsPerRank(const ModelSpec& model) const {
    return (model.n_routed_experts + redundant_experts) / ep;
  }
  // EP = DP x TP, EP divides the expert slots (experts + redundant), a DP group stays inside one
  // machine, the ranks fill the machines, TP divides the attention heads. Messages say which rule
  // broke, with the numbers.
  Status Validate(const ModelSpec& model) const;
  std::string ToString() const;  // "EP128 DP32 TP4 on 16 machines", "EP144+32 DP144 TP1 on ..."
};

struct DeploymentShape {
  int ep = 8;
  int tp = 1;
  int gpus_per_machine = 8;
  int redundant_experts = 0;
};
// Builds a deployment from EP and TP on machines of `gpus_per_machine` GPUs (DP = EP / TP,
// machines = ceil(EP / gpus_per_machine)), then validates it.
StatusOr<Deployment> MakeDeployment(const ModelSpec& model, const DeploymentShape& shape);
StatusOr<Deployment> MakeDeployment(const ModelSpec& model, int ep, int tp, int gpus_per_machine);
// Ok when `redundant` extra slots split evenly over `ep` ranks; the error names the numbers and
// the nearest redundant counts that would.
Status CheckExpertSlots(const ModelSpec& model, int ep, int redundant);

struct Workload {
  int batch = 1;                 // requests per DP group (= per GPU at TP1), all decoding together
  int kv_len = 5000;             // cached tokens per request
  int query_len = 2;             // tokens per request per step: 1 + MTP draft tokens
  double acceptance_rate = 0.6;  // P(a draft token is accepted)
  // Bytes per latent-cache element: 2 (BF16, the write-up's engine), 4 (the CPU engine's f32
  // cache). Scales the attention's cache reads and the KV memory per request.
  double kv_element_bytes = 2;

  Status Validate() const;
  int DraftTokens() const { return query_len - 1; }
  // Expected tokens a request emits per step: 1 + a + a^2 + ... (one term per draft token).
  double TokensPerStep() const;
};

}  // namespace epserve::planner
