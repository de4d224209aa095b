#include "runtime/lockstep.h"

namespace epserve {

Status AgreeStep(const Lockstep& ls, StepVote* vote) {
  int64_t v[2] = {vote->active, vote->stop};
  if (ls.world != nullptr) {
    RETURN_IF_ERROR(ls.world->AllReduceMax(v, 2));
  } else if (ls.tp()) {
    RETURN_IF_ERROR(ls.group->AllReduceMax(v, 2));
  }
  vote->active = v[0];
  vote->stop = v[1];
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

Status RunStepPlan(const Lockstep& ls, Model& model, StepPlan* plan, const KvBlocks& kv,
                   std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const bool run, ShareStepPlan(ls, plan));
  return run ? ExecutePlan(model, *plan, kv, logits) : Status::Ok();
}

Status RunDraftPlan(const Lockstep& ls, Model& model, StepPlan* drafts, const KvBlocks& kv,
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
