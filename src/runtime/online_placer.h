// Online re-placement (docs/expert-parallelism.md, "Re-placing experts while serving"): an
// expert-parallel world that moves its experts to where live traffic wants them, without
// stopping. Every group leader keeps a RoutingSketch of its recent tokens' routing; every
// `replace_every` steps, or when any rank gets SIGUSR2, the world goes through three phases,
// each entered at a step boundary on every rank at once (StepVote's placer fields):
//   1. gather: the sketches go to rank 0, which places experts with GRACE (placement/place.h)
//      on a background thread while the world keeps stepping;
//   2. load: rank 0 broadcasts the placement; each rank loads the experts it gains (from the
//      checkpoint, as its load options say) on a background thread, still stepping with the
//      old placement and all of its old experts;
//   3. switch: once every rank has loaded, all switch the routing table between two steps, then
//      free the experts they no longer hold.
// The only pause is the boundary work (a gather, a broadcast, binding views); results do not
// change, because no kernel's result depends on which rank computes a row or what rows it
// meets (docs/kernels.md, "Batch invariance"). Each switch is logged on rank 0 with the
// cross-machine copies per token measured before and after it, bytes moved and the pause.
// Thread safety: the model's thread calls everything; the background threads touch only their
// inputs and results.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/weights.h"
#include "placement/placement.h"
#include "placement/router.h"
#include "runtime/engine_worker.h"
#include "runtime/ep_replica.h"
#include "runtime/lockstep.h"
#include "runtime/routing_sketch.h"

namespace epserve {

struct OnlinePlacerOptions {
  int replace_every = 0;         // steps between re-placements; 0: only on SIGUSR2
  int64_t window_tokens = 8192;  // tokens each group's sketch keeps (the most recent)
  int64_t min_tokens = 64;       // a gather with fewer tokens in all keeps the placement
  int redundant_slots = -1;      // extra expert slots per MoE layer; -1: DefaultRedundantSlots
  LoadOptions load;              // how gained experts are held (memory, requant)
  bool log = true;               // rank 0 logs each re-placement to stderr
};

// One re-placement, as rank 0 saw it (counts summed over the ranks).
struct ReplacementReport {
  int step = 0;                // the switch happened before this step
  int64_t profile_tokens = 0;  // tokens the placement was made from
  double place_seconds = 0;    // rank 0, in the background
  double load_seconds = 0;     // the slowest rank, in the background
  int64_t experts_loaded = 0, experts_freed = 0;
  int64_t bytes_loaded = 0;
  double pause_ms = 0;  // boundary work of this re-placement, the slowest rank
  // Cross-machine (token, rank) copies per token over the main model's MoE layers, measured on
  // the tokens sent since the previous switch (or the start) and after this one (until the
  // next switch or Finish; -1 until then).
  double cross_before = 0, cross_after = -1;
  int64_t tokens_before = 0, tokens_after = 0;
};

class OnlinePlacer : public StepParticipant {
 public:
  // `replica` must outlive the placer; its experts and weights are switched in place.
  static StatusOr<std::unique_ptr<OnlinePlacer>> Create(EpReplica& replica,
                                                        const OnlinePlacerOptions& options);
  ~OnlinePlacer() override;

  // Route events of this rank's forward passes (group leaders record; others ignore them).
  void Observe(const RouteEvent& event);

  void Vote(StepVote* vote) override;
  Status AfterVote(const StepVote& vote) override;

  // After the last step, on every rank (a collective): waits for background work (a placement
  // not yet switched is dropped) and measures the traffic after the last switch.
  Status Finish();

  const std::vector<ReplacementReport>& reports() const { return reports_; }  // rank 0
  std::string FormatReports() const;  // a table of the reports and the sketch's cost
  double sketch_seconds() const { return sketch_.observe_seconds(); }
  // Fills WorkerMetrics' re-placement fields on world rank 0 (on the stepping thread).
  void AddMetrics(WorkerMetrics* metrics) const;

  // Asks for a re-placement at the next step with work (what SIGUSR2 does); kept until then.
  static void Request();
  // Makes SIGUSR2 call Request (Create does too). A rank that may be signalled while it loads
  // (engine under serve --np) calls it first: until then SIGUSR2 would end the process.
  static void InstallSignalHandler();

 private:
  enum class Phase { kIdle, kPlacing, kLoading };
  OnlinePlacer(EpReplica& replica, const OnlinePlacerOptions& options, std::vector<int> layers);
  Status Gather();
  Status StartLoading();
  Status Switch(int step);
  void JoinWorker();
  // Updates the cross-machine copies per token since the last switch (a collective).
  Status MeasureSinceSwitch();
  // This rank's cumulative (cross-machine rows, tokens sent) over the sketch's layers.
  void TrafficTotals(int64_t* remote, int64_t* tokens) const;
  // The world's traffic since the last switch, from its totals now (summed TrafficTotals):
  // cross-machine copies per token and tokens (0 and 0 when no token passed).
  void SinceSwitch(int64_t remote, int64_t token_layers, double* cross, int64_t* tokens) const;

  EpReplica& rep_;
  OnlinePlacerOptions options_;
  std::vector<int> layers_;  // the main model's MoE layers
  RoutingSketch sketch_;
  Phase phase_ = Phase::kIdle;
  int steps_ = 0, steps_since_ = 0;
  double pause_seconds_ = 0;  // this re-placement's boundary work so far
  std::thread worker_;
  std::atomic<bool> worker_done_{false};
  // Placing (rank 0): the gathered profile and the result.
  std::vector<std::string> sketches_;
  std::string placed_json_;
  double place_seconds_ = 0;
  int64_t profile_tokens_ = 0;
  // Loading: the new placement and what this rank gains.
  std::unique_ptr<placement::Placement> next_plan_;
  std::unique_ptr<placement::Router> next_router_;
  std::vector<LoadedExpert> loaded_;
  Status load_status_;
  double load_seconds_ = 0;
  // Traffic at the last switch (world totals), for the next report; after Finish, what was
  // measured since the last switch (or the start).
  int64_t remote_at_switch_ = 0, tokens_at_switch_ = 0;
  double cross_since_switch_ = 0;
  int64_t tokens_since_switch_ = 0;
  std::vector<ReplacementReport> reports_;
};

}  // namespace epserve
