// Prefill (`epserve plan prefill`, docs/planner.md "Prefill"): the time of the forward passes
// that turn prompts into their latent KV cache and first token, with the decode model's kernels
// and efficiency factors. MLA runs in its expanded MHA form (kv_b_proj, causal attention), the
// GEMMs and the GroupGEMM see thousands of tokens (compute-bound), dispatch/combine move every
// prompt token, and a chunk budget splits long prompts over several passes (chunked prefill),
// each re-expanding its cached prefix. Then the time to first token at a prefill load: an
// M/D/1 queue per DP group in front of that service time.
// Thread safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <vector>

#include "base/status.h"
#include "planner/layer_model.h"
#include "planner/step_model.h"

namespace epserve::planner {

// Whether the MTP layers run over the prompt (they keep their own latent cache, which the
// first decode step's draft needs).
enum class MtpPrefill { kWithMtp, kWithoutMtp };

struct PrefillOptions {
  std::vector<int> prompt_lens;  // prompts one DP group prefills together, first come first
  int chunk_tokens = 0;          // most prompt tokens per pass per DP group; 0: whole prompts
  // DP groups prefilling such a batch at the same time (the rest idle); 0: every group. Their
  // rows all reach the GroupGEMM; the busiest group sets the pace.
  int busy_groups = 0;
  std::optional<OverlapMode> overlap;  // nullopt: the fastest mode for each pass
  MtpPrefill mtp = MtpPrefill::kWithMtp;
  double kv_element_bytes = 2;     // latent cache element (2: BF16)
  bool require_memory_fit = true;  // error out when the prompts' KV does not fit
};

// One forward pass of one DP group.
struct PrefillPass {
  std::vector<PrefillSegment> segments;  // the chunks it computes
  int finished_prompts = 0;              // prompts whose last chunk is in this pass
  OverlapMode mode = OverlapMode::kNone;
  LayerBreakdown moe_layer;  // averaged over routing layers
  LayerBreakdown dense_layer;
  double moe_layers_us = 0;
  double dense_layers_us = 0;
  double mtp_us = 0;      // MTP layers over the chunk (+ eh_proj, + LM head of finished prompts)
  double lm_head_us = 0;  // the last token of each finished prompt
  double overhead_us = 0;
  double pass_us = 0;
};

struct PrefillEstimate {
  std::vector<PrefillPass> passes;
  double total_us = 0;                 // all passes, back to back
  std::vector<double> prompt_done_us;  // when each prompt's first token is ready (no queue)
  double prompt_tokens = 0;            // per busy DP group
  int busy_groups = 0;
  double tokens_per_s_per_gpu = 0;  // prompt tokens of all busy groups / total time / GPUs
  double tokens_per_s_per_machine = 0;
  MemoryFit memory;  // weights + the KV of this group's prompts
};

// Pass schedule: prompts in order, each pass filled up to chunk_tokens (a prompt's tokens may
// span passes; a chunk's prefix is what earlier passes computed of that prompt).
StatusOr<PrefillEstimate> EstimatePrefill(const PlanContext& ctx, const Deployment& deployment,
                                          const PrefillOptions& options);

struct TtftOptions {
  int prompt_len = 1024;
  double rate = 0;  // prompts per second arriving at the whole deployment (Poisson)
  int chunk_tokens = 0;
  std::optional<OverlapMode> overlap;
  MtpPrefill mtp = MtpPrefill::kWithMtp;
  double kv_element_bytes = 2;
  double extra_us = 0;  // added to the time to first token (e.g. the KV transfer)
};

struct TtftEstimate {
  double service_us = 0;   // one prompt's passes while `busy_groups` groups prefill
  double utilization = 0;  // rho = rate per DP group x service time
  double wait_us = 0;      // M/D/1 mean queueing delay rho S / (2 (1 - rho))
  double ttft_us = 0;      // wait + service + extra; infinite when rho >= 1
  int busy_groups = 0;     // 1 + rho (DP - 1) rounded up: a served prompt's expected company
  bool stable = false;     // rho < 1
  PrefillEstimate prefill;
};

// Each DP group prefills its share of the prompts (rate / DP) one at a time, first come first
// served. The busy-group count and the service time are solved together (fixed point).
StatusOr<TtftEstimate> EstimateTtft(const PlanContext& ctx, const Deployment& deployment,
                                    const TtftOptions& options);

}  // namespace epserve::planner
