// Lock-step stepping under expert parallelism (SPEC §3). Every rank of the world runs every
// engine step together, because each MoE layer's dispatch/combine needs all of them: each step
// the ranks agree (one AllReduceMax over the world) whether anyone has work and whether anyone
// asked to stop; a DP group with nothing to do steps with zero tokens; the TP ranks of a group
// run the plan their leader (group rank 0) broadcasts, on their own replica of its cache.
// RunRequests (batch runs) and EngineWorker (serving) both step through these two calls.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"
#include "runtime/engine.h"

namespace epserve {

struct Lockstep {
  comm::Communicator* world = nullptr;  // all ranks; null: one process
  comm::Communicator* group = nullptr;  // this DP group's TP ranks; null or size 1: no TP

  bool leader() const { return group == nullptr || group->rank() == 0; }
  bool tp() const { return group != nullptr && group->size() > 1; }
  bool distributed() const { return world != nullptr || tp(); }
};

// What the ranks agree on before a step; each field is the maximum over the ranks.
struct StepVote {
  int64_t active = 0;  // someone has work: everyone steps
  int64_t stop = 0;    // someone was asked to stop: everyone winds down
  // Online re-placement (runtime/online_placer.h) moves through its phases on these.
  int64_t placer_gather = 0;   // someone asks for a new placement: gather the routing sketches
  int64_t placer_ready = 0;    // rank 0 has computed it: broadcast it
  int64_t placer_loading = 0;  // someone is still loading its new experts: do not switch yet
  int64_t placer_failed = 0;   // someone could not load its new experts: drop the placement
};

// Work that must happen at a step boundary on every rank at once (between the vote and the
// step): it adds to the vote, then acts on the agreed one. Only called while the world steps.
class StepParticipant {
 public:
  virtual ~StepParticipant() = default;
  virtual void Vote(StepVote* vote) = 0;
  virtual Status AfterVote(const StepVote& vote) = 0;
};

// One collective over the world (or the TP group alone); a no-op in one process.
Status AgreeStep(const Lockstep& ls, StepVote* vote);

// Followers receive their leader's plan; then everyone runs it (with zero chunks too when
// distributed: the MoE collectives need every rank).
Status RunStepPlan(const Lockstep& ls, ForwardPass& model, StepPlan* plan, const KvBlocks& kv,
                   std::vector<float>* logits);

// With MTP, after the leader's Complete: the step's draft pass (Engine::ScheduleDrafts on the
// leader), the same way: followers receive it, everyone runs the MTP module.
Status RunDraftPlan(const Lockstep& ls, ForwardPass& model, StepPlan* drafts, const KvBlocks& kv,
                    std::vector<float>* logits);

// The whole draft phase of a step for a driver: schedule (leader), run, complete (leader).
// A no-op without EngineOptions::mtp.
Status RunDrafts(const Lockstep& ls, Engine& engine, std::vector<float>* logits);

}  // namespace epserve
