#include "planner/disagg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

namespace epserve::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string MsText(double us) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f ms", us / 1e3);
  return text;
}

std::string RateText(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::string Describe(const std::string& gpu, const Deployment& d, int replicas) {
  return std::to_string(replicas) + " x " + gpu + " " + d.ToString();
}

bool DecodeUsesMtp(const DisaggProblem& p) {
  return p.decode.query_len > 1 && p.model->num_nextn_predict_layers > 0;
}

// Deployments and routing models of the search, built once.
struct Candidate {
  const HardwareSpec* hw;
  Deployment deployment;
  const RoutingModel* routing;
};

class CandidateSet {
 public:
  static StatusOr<CandidateSet> Build(const DisaggProblem& p, const PoolSearch& s) {
    CandidateSet set;
    for (const HardwareSpec* hw : s.gpus) {
      const int gpm = s.gpus_per_machine > 0 ? s.gpus_per_machine : hw->gpus_per_machine;
      for (int ep : s.ep_values) {
        for (int r : s.redundant_values) {
          if (!CheckExpertSlots(*p.model, ep, r).ok()) continue;
          for (int tp : s.tp_values) {
            StatusOr<Deployment> d = MakeDeployment(
                *p.model, {.ep = ep, .tp = tp, .gpus_per_machine = gpm, .redundant_experts = r});
            if (!d.ok()) continue;
            const auto key = std::make_tuple(ep, r, d->RanksPerMachine());
            auto it = set.routing_.find(key);
            if (it == set.routing_.end()) {
              ASSIGN_OR_RETURN(
                  RoutingModel routing,
                  RoutingModel::Create(*p.model, {.ep = ep,
                                                  .ranks_per_machine = d->RanksPerMachine(),
                                                  .redundant_experts = r,
                                                  .trace = p.trace}));
              it = set.routing_.emplace(key, std::make_unique<RoutingModel>(std::move(routing)))
                       .first;
            }
            set.candidates_.push_back({hw, *d, it->second.get()});
          }
        }
      }
    }
    if (set.candidates_.empty()) {
      return Status::InvalidArgument(
          "no deployment in the search: no --ep value splits the experts evenly with any "
          "--redundant-experts value, or no --tp value fits");
    }
    return set;
  }
  const std::vector<Candidate>& candidates() const { return candidates_; }

 private:
  std::map<std::tuple<int, int, int>, std::unique_ptr<RoutingModel>> routing_;
  std::vector<Candidate> candidates_;
};

// Fewer machines, then fewer GPUs, then the lower `value`.
bool Cheaper(int machines, int gpus, double value, int best_machines, int best_gpus,
             double best_value) {
  if (machines != best_machines) return machines < best_machines;
  if (gpus != best_gpus) return gpus < best_gpus;
  return value < best_value;
}

std::string SearchText(const PoolSearch& s) {
  auto list = [](const std::vector<int>& v) {
    std::string out;
    for (int x : v) {
      if (!out.empty()) out += ",";
      out += std::to_string(x);
    }
    return out;
  };
  std::string gpus;
  for (const HardwareSpec* hw : s.gpus) {
    if (!gpus.empty()) gpus += ",";
    gpus += hw->name;
  }
  return "searched " + gpus + ", EP " + list(s.ep_values) + ", TP " + list(s.tp_values) +
         ", redundant experts " + list(s.redundant_values) + ", up to " +
         std::to_string(s.max_replicas) + " replicas";
}

StatusOr<PrefillPool> BestPrefill(const DisaggProblem& p, const PoolSearch& s,
                                  const CandidateSet& set, const HardwareSpec* only,
                                  double link_gbs) {
  std::optional<PrefillPool> best;
  double lowest_ttft = kInf;
  std::string lowest_what = "none";
  for (const Candidate& c : set.candidates()) {
    if (c.hw != only) continue;
    for (int chunk : s.prefill_chunks) {
      for (int n = 1; n <= s.max_replicas; ++n) {
        if (best && n * c.deployment.num_machines > best->Machines()) break;
        ASSIGN_OR_RETURN(PrefillPool pool, EvaluatePrefillPool(p, {.hw = c.hw,
                                                                   .routing = c.routing,
                                                                   .deployment = c.deployment,
                                                                   .replicas = n,
                                                                   .chunk_tokens = chunk,
                                                                   .link_gbs = link_gbs}));
        if (!pool.fits) break;  // a prompt's KV does not fit: no replica count changes that
        if (pool.ttft.stable && pool.ttft.ttft_us < lowest_ttft) {
          lowest_ttft = pool.ttft.ttft_us;
          lowest_what = Describe(c.hw->name, c.deployment, n);
        }
        if (pool.meets) {
          if (!best ||
              Cheaper(pool.Machines(), n * c.deployment.ep, pool.ttft.ttft_us, best->Machines(),
                      best->replicas * best->deployment.ep, best->ttft.ttft_us)) {
            best = pool;
          }
          break;  // more replicas only cost more
        }
        // With the queue gone and one busy group, a prompt still takes its service time.
        if (pool.ttft.stable && pool.ttft.utilization < 1e-3) break;
      }
    }
  }
  if (!best) {
    return Status::InvalidArgument(
        "no prefill pool on " + only->name +
        " meets TTFT <= " + MsText(p.target.ttft_slo_ms * 1e3) + " for " +
        std::to_string(p.target.prompt_len) + "-token prompts at " + RateText(p.target.rate) +
        " requests/s (" + SearchText(s) + "); the lowest TTFT found is " +
        (lowest_ttft < kInf ? MsText(lowest_ttft) + " (" + lowest_what + ")"
                            : std::string("none: every pool is overloaded or out of memory")));
  }
  return *best;
}

StatusOr<DecodePool> BestDecode(const DisaggProblem& p, const PoolSearch& s,
                                const CandidateSet& set, const HardwareSpec* only) {
  std::optional<DecodePool> best;
  double lowest_tpot = kInf;
  std::string lowest_what = "none";
  for (const Candidate& c : set.candidates()) {
    if (c.hw != only) continue;
    for (int n = 1; n <= s.max_replicas; ++n) {
      if (best && n * c.deployment.num_machines > best->Machines()) break;
      ASSIGN_OR_RETURN(
          DecodePool pool,
          EvaluateDecodePool(
              p, {.hw = c.hw, .routing = c.routing, .deployment = c.deployment, .replicas = n}));
      if (pool.fits && pool.tpot_us < lowest_tpot) {
        lowest_tpot = pool.tpot_us;
        lowest_what =
            Describe(c.hw->name, c.deployment, n) + " at batch " + std::to_string(pool.batch);
      }
      if (pool.meets) {
        if (!best || Cheaper(pool.Machines(), n * c.deployment.ep, pool.tpot_us, best->Machines(),
                             best->replicas * best->deployment.ep, best->tpot_us)) {
          best = pool;
        }
        break;
      }
      if (pool.fits && pool.batch == 1) break;  // batch 1 is as fast as this deployment gets
    }
  }
  if (!best) {
    return Status::InvalidArgument(
        "no decode pool on " + only->name + " meets TPOT <= " + MsText(p.target.tpot_slo_ms * 1e3) +
        " at " + RateText(p.target.rate) + " requests/s of " + std::to_string(p.target.prompt_len) +
        " + " + std::to_string(p.target.output_len) + " tokens (" + SearchText(s) +
        "); the lowest TPOT found is " +
        (lowest_tpot < kInf ? MsText(lowest_tpot) + " (" + lowest_what + ")"
                            : std::string("none: no batch fits in memory")));
  }
  return *best;
}

// max(TTFT / SLO, TPOT / SLO): <= 1 meets both; infinite when it cannot serve.
double SloRatio(const DisaggProblem& p, const ColocatedPool& pool) {
  if (!pool.stable || !pool.fits) return kInf;
  return std::max(pool.ttft_us / (p.target.ttft_slo_ms * 1e3),
                  pool.tpot_us / (p.target.tpot_slo_ms * 1e3));
}

StatusOr<std::optional<ColocatedPool>> ColocatedSameSize(const DisaggProblem& p,
                                                         const PoolSearch& s,
                                                         const CandidateSet& set, int machines) {
  std::optional<ColocatedPool> best;
  for (const Candidate& c : set.candidates()) {
    if (machines % c.deployment.num_machines != 0) continue;
    const int n = machines / c.deployment.num_machines;
    for (int chunk : s.colocated_chunks) {
      ASSIGN_OR_RETURN(ColocatedPool pool, EvaluateColocated(p, {.hw = c.hw,
                                                                 .routing = c.routing,
                                                                 .deployment = c.deployment,
                                                                 .replicas = n,
                                                                 .chunk_tokens = chunk}));
      if (SloRatio(p, pool) == kInf) continue;
      if (!best || SloRatio(p, pool) < SloRatio(p, *best)) best = pool;
    }
  }
  return best;
}

StatusOr<std::optional<ColocatedPool>> ColocatedSmallest(const DisaggProblem& p,
                                                         const PoolSearch& s,
                                                         const CandidateSet& set,
                                                         int max_machines) {
  std::optional<ColocatedPool> best;
  for (const Candidate& c : set.candidates()) {
    for (int chunk : s.colocated_chunks) {
      for (int n = 1; n * c.deployment.num_machines <= max_machines; ++n) {
        if (best && n * c.deployment.num_machines > best->Machines()) break;
        ASSIGN_OR_RETURN(ColocatedPool pool, EvaluateColocated(p, {.hw = c.hw,
                                                                   .routing = c.routing,
                                                                   .deployment = c.deployment,
                                                                   .replicas = n,
                                                                   .chunk_tokens = chunk}));
        if (!pool.meets) continue;
        if (!best ||
            Cheaper(pool.Machines(), n * c.deployment.ep, SloRatio(p, pool), best->Machines(),
                    best->replicas * best->deployment.ep, SloRatio(p, *best))) {
          best = pool;
        }
        break;
      }
    }
  }
  return best;
}

}  // namespace

Status ServingTarget::Validate() const {
  if (prompt_len <= 0) {
    return Status::InvalidArgument("--prompt-len " + std::to_string(prompt_len) +
                                   " must be positive");
  }
  if (output_len <= 0) {
    return Status::InvalidArgument("--output-len " + std::to_string(output_len) +
                                   " must be positive");
  }
  if (!(rate > 0)) return Status::InvalidArgument("--rate " + RateText(rate) + " must be > 0");
  if (!(ttft_slo_ms > 0)) {
    return Status::InvalidArgument("--ttft-slo " + RateText(ttft_slo_ms) + " must be > 0");
  }
  if (!(tpot_slo_ms > 0)) {
    return Status::InvalidArgument("--tpot-slo " + RateText(tpot_slo_ms) + " must be > 0");
  }
  return Status::Ok();
}

double KvBytesPerRequest(const ModelSpec& model, const ServingTarget& target,
                         const DecodeSettings& decode) {
  const bool mtp = decode.query_len > 1 && model.num_nextn_predict_layers > 0;
  const double per_token =
      static_cast<double>(mtp ? model.KvBytesPerTokenWithMtp() : model.KvBytesPerToken());
  return per_token * target.prompt_len * (decode.kv_element_bytes / 2.0);
}

double KvTransferUs(const EfficiencyFactors& eff, const HardwareSpec& hw, double link_gbs,
                    double bytes) {
  HardwareSpec link = hw;
  link.infiniband_gbs = link_gbs;
  return CommCost(link, eff.kv_transfer, {.infiniband = bytes}).time_us;
}

StatusOr<PrefillPool> EvaluatePrefillPool(const DisaggProblem& p, const PoolCandidate& c) {
  RETURN_IF_ERROR(p.target.Validate());
  if (c.replicas <= 0) return Status::InvalidArgument("replicas must be positive");
  const Deployment& d = c.deployment;
  const PlanContext ctx{.hw = c.hw, .model = p.model, .eff = p.prefill_eff, .routing = c.routing};
  PrefillPool pool;
  pool.gpu = c.hw->name;
  pool.deployment = d;
  pool.replicas = c.replicas;
  pool.chunk_tokens = c.chunk_tokens;
  const double bytes = KvBytesPerRequest(*p.model, p.target, p.decode);
  const double link = c.link_gbs > 0 ? c.link_gbs : c.hw->infiniband_gbs;
  pool.kv_transfer_us = KvTransferUs(*p.prefill_eff, *c.hw, link, bytes);
  const double rate_per_group = p.target.rate / c.replicas / d.dp;
  pool.kv_link_utilization = rate_per_group * pool.kv_transfer_us * 1e-6;
  // A prefill group holds one prompt's latent cache until it is sent.
  const MtpPrefill mtp = DecodeUsesMtp(p) ? MtpPrefill::kWithMtp : MtpPrefill::kWithoutMtp;
  const MemoryFit fit = EstimateMemory(ctx, d,
                                       {.batch = 1,
                                        .kv_len = p.target.prompt_len,
                                        .query_len = mtp == MtpPrefill::kWithMtp ? 2 : 1,
                                        .kv_element_bytes = p.decode.kv_element_bytes});
  if (!fit.batch_fits) return pool;
  pool.fits = true;
  ASSIGN_OR_RETURN(pool.ttft, EstimateTtft(ctx, d,
                                           {.prompt_len = p.target.prompt_len,
                                            .rate = p.target.rate / c.replicas,
                                            .chunk_tokens = c.chunk_tokens,
                                            .mtp = mtp,
                                            .kv_element_bytes = p.decode.kv_element_bytes,
                                            .extra_us = pool.kv_transfer_us}));
  pool.meets = pool.ttft.stable && pool.ttft.ttft_us <= p.target.ttft_slo_ms * 1e3 &&
               pool.kv_link_utilization < 1;
  return pool;
}

StatusOr<DecodePool> EvaluateDecodePool(const DisaggProblem& p, const PoolCandidate& c) {
  RETURN_IF_ERROR(p.target.Validate());
  if (c.replicas <= 0) return Status::InvalidArgument("replicas must be positive");
  const Deployment& d = c.deployment;
  const PlanContext ctx{.hw = c.hw, .model = p.model, .eff = p.decode_eff, .routing = c.routing};
  DecodePool pool;
  pool.gpu = c.hw->name;
  pool.deployment = d;
  pool.replicas = c.replicas;
  // Steps are priced at the mean context of a decoding request; memory at its largest.
  Workload w{.batch = 1,
             .kv_len = p.target.prompt_len + p.target.output_len / 2,
             .query_len = p.decode.query_len,
             .acceptance_rate = p.decode.acceptance_rate,
             .kv_element_bytes = p.decode.kv_element_bytes};
  Workload peak = w;
  peak.kv_len = p.target.prompt_len + p.target.output_len;
  const MemoryFit fit = EstimateMemory(ctx, d, peak);
  if (!fit.weights_fit || fit.max_batch < 1) return pool;
  const double rate_per_group = p.target.rate / c.replicas / d.dp;
  // Little's law: a group decodes rate x output_len x TPOT requests at once. TPOT grows with the
  // batch, so the smallest consistent batch is reached from below.
  int batch = 1;
  for (int iteration = 0; iteration < 1000; ++iteration) {
    w.batch = batch;
    ASSIGN_OR_RETURN(
        pool.step,
        EstimateStep(ctx, d, w, {.overlap = p.decode.overlap, .require_memory_fit = false}));
    pool.tpot_us = pool.step.step_us / pool.step.tokens_per_step;
    const double in_flight = rate_per_group * p.target.output_len * pool.tpot_us * 1e-6;
    const int need = std::max(1, static_cast<int>(std::ceil(in_flight - 1e-9)));
    if (need <= batch || need > fit.max_batch) {
      batch = std::max(batch, need);
      break;
    }
    batch = need;
  }
  pool.batch = batch;
  pool.fits = batch <= fit.max_batch;
  pool.step.memory = fit;
  pool.meets = pool.fits && pool.tpot_us <= p.target.tpot_slo_ms * 1e3;
  return pool;
}

StatusOr<DisaggPlan> PlanDisagg(const DisaggProblem& p, const PoolSearch& s) {
  RETURN_IF_ERROR(p.target.Validate());
  if (p.model == nullptr || p.decode_eff == nullptr || p.prefill_eff == nullptr) {
    return Status::InvalidArgument("disagg: model and efficiency factors are required");
  }
  if (s.gpus.empty()) return Status::InvalidArgument("disagg: no GPU kinds to search");
  if (s.max_replicas <= 0) return Status::InvalidArgument("--max-replicas must be positive");
  ASSIGN_OR_RETURN(CandidateSet set, CandidateSet::Build(p, s));
  DisaggPlan plan;
  plan.target = p.target;
  plan.kv_bytes_per_request = KvBytesPerRequest(*p.model, p.target, p.decode);
  bool found = false;
  Status last_error = Status::Ok();
  std::map<std::pair<const HardwareSpec*, double>, StatusOr<PrefillPool>> prefill_cache;
  for (const HardwareSpec* decode_hw : s.gpus) {
    StatusOr<DecodePool> decode = BestDecode(p, s, set, decode_hw);
    if (!decode.ok()) {
      last_error = decode.status();
      continue;
    }
    for (const HardwareSpec* prefill_hw : s.gpus) {
      const double link = std::min(prefill_hw->infiniband_gbs, decode_hw->infiniband_gbs);
      auto cached = prefill_cache.find({prefill_hw, link});
      if (cached == prefill_cache.end()) {
        cached =
            prefill_cache
                .emplace(std::make_pair(prefill_hw, link), BestPrefill(p, s, set, prefill_hw, link))
                .first;
      }
      const StatusOr<PrefillPool>& prefill = cached->second;
      if (!prefill.ok()) {
        last_error = prefill.status();
        continue;
      }
      const int machines = prefill->Machines() + decode->Machines();
      const int gpus =
          prefill->replicas * prefill->deployment.ep + decode->replicas * decode->deployment.ep;
      const double ttft = prefill->ttft.ttft_us;
      if (!found ||
          Cheaper(machines, gpus, ttft, plan.machines, plan.gpus, plan.prefill.ttft.ttft_us)) {
        plan.prefill = *prefill;
        plan.decode = *decode;
        plan.machines = machines;
        plan.gpus = gpus;
        found = true;
      }
    }
  }
  if (!found) return last_error;
  ASSIGN_OR_RETURN(plan.colocated_same_size, ColocatedSameSize(p, s, set, plan.machines));
  ASSIGN_OR_RETURN(plan.colocated_smallest, ColocatedSmallest(p, s, set, 3 * plan.machines));
  return plan;
}

}  // namespace epserve::planner
