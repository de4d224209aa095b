#include "runtime/lockstep.h"

namespace epserve {

Status AgreeStep(const Lockstep& ls, StepVote* vote) {
  int64_t* fields[] = {&vote->active,       &vote->stop,           &vote->placer_gather,
                       &vote->placer_ready, &vote->placer_loading, &vote->placer_failed};
  constexpr int kFields = sizeof(fields) / sizeof(fields[0]);
  int64_t v[kFields];
  for (int i = 0; i < kFields; ++i) v[i] = *fields[i];
  if (ls.world != nullptr) {
    RETURN_IF_ERROR(ls.world->AllReduceMax(v, kFields));
  } else if (ls.tp()) {
    RETURN_IF_ERROR(ls.group->AllReduceMax(v, kFields));
  }
  for (int i = 0; i < kFields; ++i) *fields[i] = v[i];
  return Status::Ok();
}

namespace {
// TP followers receive the leader's plan. Returns whether the plan must run here (it has
// chunks, or the world's collectives need this rank anyway).
StatusOr<bool> ShareStepPlan(const Lockstep& ls, StepPlan* plan) {
  if (ls.tp()) {
    std::string bytes = ls.leader() ? plan->Serialize() : std::string();
    RETURN_IF_ERROR(ls.group->Broadcast(&bytes, 0));
    if (!ls.leader()) {
      ASSIGN_OR_RETURN(*plan, StepPlan::Deserialize(bytes));
    }
  }
  return !plan->chunks.empty() || ls.distributed();
}
}  // namespace

Status RunStepPlan(const Lockstep& ls, ForwardPass& model, StepPlan* plan, const KvBlocks& kv,
                   std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const bool run, ShareStepPlan(ls, plan));
  return run ? ExecutePlan(model, *plan, kv, logits) : Status::Ok();
}

Status RunDraftPlan(const Lockstep& ls, ForwardPass& model, StepPlan* drafts, const KvBlocks& kv,
                    std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const bool run, ShareStepPlan(ls, drafts));
  return run ? ExecuteDraftPlan(model, *drafts, kv, logits) : Status::Ok();
}

Status RunDrafts(const Lockstep& ls, Engine& engine, std::vector<float>* logits) {
  if (!engine.options().mtp) return Status::Ok();
  StepPlan drafts;
  if (ls.leader()) drafts = engine.ScheduleDrafts();
  RETURN_IF_ERROR(RunDraftPlan(ls, engine.model(), &drafts, engine.pool().blocks(), logits));
  if (ls.leader()) engine.CompleteDrafts(drafts, *logits);
  return Status::Ok();
}

}  // namespace epserve
