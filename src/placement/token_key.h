// The key that picks a token's copy of a replicated expert (placement::Router::PickRank): a
// hash input made of what identifies the token in every view of it - its sequence (prompt) id
// and its position - so the engine at run time and `place evaluate` replaying a trace of the
// same tokens choose the same copies.
#pragma once

#include <cstdint>

namespace epserve::placement {

inline uint64_t TokenKey(uint32_t sequence_id, uint32_t position) {
  return (static_cast<uint64_t>(sequence_id) << 32) | position;
}

}  // namespace epserve::placement
