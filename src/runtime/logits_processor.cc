#include "runtime/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace epserve {

LogitsProcessor::LogitsProcessor(LogitsAdjustments adjustments, const std::vector<int32_t>& prompt,
                                 std::vector<int32_t> stop_ids,
                                 std::unique_ptr<TokenConstraint> constraint)
    : adj_(std::move(adjustments)),
      stop_ids_(std::move(stop_ids)),
      constraint_(std::move(constraint)) {
  active_ = adj_.any() || constraint_ != nullptr;
  if (adj_.repetition_penalty != 1.0f) seen_.insert(prompt.begin(), prompt.end());
}

const float* LogitsProcessor::Apply(const float* row, int vocab, int generated, int remaining) {
  if (!active_) return row;
  row_.assign(row, row + vocab);
  float* l = row_.data();
  for (const auto& [id, bias] : adj_.logit_bias)
    if (id >= 0 && id < vocab) l[id] += bias;
  if (adj_.repetition_penalty != 1.0f)
    for (int32_t id : seen_)
      if (id >= 0 && id < vocab)
        l[id] = l[id] > 0 ? l[id] / adj_.repetition_penalty : l[id] * adj_.repetition_penalty;
  if (adj_.presence_penalty != 0.0f || adj_.frequency_penalty != 0.0f)
    for (const auto& [id, n] : counts_)
      if (id >= 0 && id < vocab)
        l[id] -= adj_.presence_penalty + adj_.frequency_penalty * static_cast<float>(n);
  const float kNever = -std::numeric_limits<float>::infinity();
  if (generated < adj_.min_tokens)
    for (int32_t id : stop_ids_)
      if (id >= 0 && id < vocab) l[id] = kNever;
  if (constraint_ != nullptr) constraint_->Restrict(l, vocab, remaining);
  return l;
}

Status LogitsProcessor::Accept(int32_t token) {
  if (adj_.presence_penalty != 0.0f || adj_.frequency_penalty != 0.0f) ++counts_[token];
  if (adj_.repetition_penalty != 1.0f) seen_.insert(token);
  if (constraint_ != nullptr) return constraint_->Accept(token);
  return Status::Ok();
}

}  // namespace epserve
