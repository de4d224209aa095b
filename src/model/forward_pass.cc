#include "model/forward_pass.h"

#include <string>

namespace epserve {

const char* OverlapName(Overlap mode) {
  switch (mode) {
    case Overlap::kNone:
      return "none";
    case Overlap::kDispatch:
      return "dispatch";
    case Overlap::kMicroBatch:
      return "microbatch";
  }
  return "?";
}

StatusOr<Overlap> ParseOverlap(const std::string& name) {
  for (Overlap mode : {Overlap::kNone, Overlap::kDispatch, Overlap::kMicroBatch})
    if (name == OverlapName(mode)) return mode;
  return Status::InvalidArgument("overlap mode \"" + name +
                                 "\" (want none, dispatch or microbatch)");
}

std::string NonFiniteActivation::Message() const {
  const std::string where =
      layer < 0 ? "embedding" : "layer " + std::to_string(layer) + " (" + part + ")";
  return where + ": non-finite activation (" + (nan ? "NaN" : "Inf") + ") at token position " +
         std::to_string(position);
}

Status CheckBatchShape(const ForwardBatch& batch, const KvBlocks& kv, int vocab_size) {
  for (const SequenceChunk& ch : batch.chunks) {
    const int64_t end = ch.start + static_cast<int64_t>(ch.tokens.size());
    if (ch.tokens.empty())
      return Status::InvalidArgument("empty chunk for sequence " + std::to_string(ch.sequence_id));
    if (ch.want_logits && (ch.num_logits < 1 || ch.num_logits > static_cast<int>(ch.tokens.size())))
      return Status::InvalidArgument(
          "sequence " + std::to_string(ch.sequence_id) + ": " + std::to_string(ch.num_logits) +
          " logits rows from a chunk of " + std::to_string(ch.tokens.size()) + " tokens");
    if (ch.start < 0 || end > static_cast<int64_t>(ch.blocks.size()) * kv.block_size)
      return Status::InvalidArgument(
          "sequence " + std::to_string(ch.sequence_id) + " needs " + std::to_string(end) +
          " positions; its block table holds " +
          std::to_string(static_cast<int64_t>(ch.blocks.size()) * kv.block_size));
    for (int32_t b : ch.blocks)
      if (b < 0 || b >= kv.num_blocks)
        return Status::InvalidArgument("sequence " + std::to_string(ch.sequence_id) + ": block " +
                                       std::to_string(b) + " outside the pool of " +
                                       std::to_string(kv.num_blocks));
    for (int32_t tok : ch.tokens)
      if (tok < 0 || tok >= vocab_size)
        return Status::InvalidArgument("token id " + std::to_string(tok) + " out of range [0, " +
                                       std::to_string(vocab_size) + ")");
  }
  return Status::Ok();
}

}  // namespace epserve
