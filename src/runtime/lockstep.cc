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

Status RunStepPlan(const Lockstep& ls, Model& model, StepPlan* plan, const KvBlocks& kv,
                   std::vector<float>* logits) {
  if (ls.tp()) {
    std::string bytes = ls.leader() ? plan->Serialize() : std::string();
    RETURN_IF_ERROR(ls.group->Broadcast(&bytes, 0));
    if (!ls.leader()) {
      ASSIGN_OR_RETURN(*plan, StepPlan::Deserialize(bytes));
    }
  }
  if (plan->chunks.empty() && !ls.distributed()) return Status::Ok();
  return ExecutePlan(model, *plan, kv, logits);
}

}  // namespace epserve
