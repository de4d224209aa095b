// Internal to V4Model: one Forward's per-token tables (position, chunk, token id) and access to
// the cache rows of the batch's sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward_pass.h"
#include "model/v4/v4_model.h"

namespace epserve::v4 {

struct V4Model::Step {
  Step(const ForwardBatch& b, const KvBlocks& k) : batch(b), kv(k) {
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      const SequenceChunk& ch = b.chunks[i];
      first_token.push_back(static_cast<int64_t>(pos.size()));
      for (size_t j = 0; j < ch.tokens.size(); ++j) {
        pos.push_back(ch.start + static_cast<int64_t>(j));
        chunk.push_back(static_cast<int32_t>(i));
        ids.push_back(ch.tokens[j]);
      }
    }
    T = static_cast<int64_t>(pos.size());
  }
  // The record of position p of chunk i's sequence (every layer's row: V4CacheRow offsets).
  float* RowAt(int32_t i, int64_t p) const {
    const SequenceChunk& ch = batch.chunks[i];
    return static_cast<float*>(kv.data) +
           kv.RowOffset(ch.blocks[p / kv.block_size], 0, p % kv.block_size);
  }
  // The record of token t of the step.
  float* Row(int64_t t) const { return RowAt(chunk[t], pos[t]); }

  const ForwardBatch& batch;
  const KvBlocks& kv;
  int64_t T = 0;
  std::vector<int64_t> pos;          // per token
  std::vector<int32_t> chunk;        // per token
  std::vector<int32_t> ids;          // per token
  std::vector<int64_t> first_token;  // per chunk
};

}  // namespace epserve::v4
