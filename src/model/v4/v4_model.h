// DeepSeek-V4's forward pass on the CPU (docs/v4-model.md §4-§8), "exact" numerics as
// tests/reference/reference_v4.py --numerics exact: float32 activations, exact weights, and the
// model's own quantizations only (q8_64 of the KV entries' and attention compressor entries'
// non-rotary dims; Hadamard + q4 of the indexer's queries and keys). No bfloat16 rounding of
// activations and no FP8 activation quantization in the projections (that is DeepSeek's run,
// the reference's --numerics deepseek, not implemented here).
//
// Decode state is the simple per-sequence form, V4SequenceState: per layer a ring of the last
// `window` KV entries, the compressed entries so far, the indexer's compressed keys and each
// compressor's group-in-progress (and, ratio 4, previous group) rows. A prompt prefilled in one
// or several chunks and then decoded a token at a time gives the logits of recomputing the whole
// sequence. The paged form (blocks of a shared pool, prefix reuse, the serving engine) comes
// next; nothing here knows the engine.
//
// The MTP module is not run (its tensors are not bound); V4 is not wired to the engine or CLI
// yet: tools/v4_generate.cc drives it.
//
// Thread safety: a V4Model is immutable; Forward uses the pool (one Forward at a time per pool)
// and mutates only the chunks' states.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/v4/v4_config.h"
#include "model/v4/v4_ops.h"
#include "model/v4/v4_weights.h"

namespace epserve::v4 {

// Compressor rows of one sequence, as DeepSeek's kv_state/score_state: 2r rows of c d floats
// for ratio 4 (rows 0..r-1 the previous complete group, r..2r-1 the group in progress), r rows
// otherwise. sigma includes ape.
struct V4CompressorState {
  std::vector<float> kappa, sigma;
  int64_t num_groups = 0;  // complete groups so far (= entries emitted)
};

struct V4LayerState {
  std::vector<float> window;      // [W, Dh] ring: position p in slot p % W
  std::vector<float> compressed;  // [entries, Dh]
  V4CompressorState compressor;
  std::vector<float> index_keys;  // ratio 4: [entries, Di]
  V4CompressorState index_compressor;
};

class V4SequenceState {
 public:
  explicit V4SequenceState(const V4Config& c);
  // Back to an empty sequence (keeps the allocations).
  void Reset();
  int64_t num_tokens() const { return num_tokens_; }

 private:
  friend class V4Model;
  const V4Config* config_;
  int64_t num_tokens_ = 0;
  std::vector<V4LayerState> layers_;
};

// The next tokens of one sequence.
struct V4Chunk {
  V4SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
};

enum class V4Logits { kLast, kAll };

class V4Model {
 public:
  V4Model(const V4Weights& weights, ThreadPool& pool);

  const V4Config& config() const { return c_; }

  // Runs each chunk (appending its tokens to its state) and writes logits [vocab] float32:
  // one row per chunk (its last position) for kLast, one per token of every chunk, chunk after
  // chunk, for kAll. Tokens must be in [0, vocab); chunks must be non-empty and their states
  // distinct. On error no state has changed for the failing chunk's checks (InvalidArgument).
  Status Forward(std::span<const V4Chunk> chunks, float* logits, V4Logits which = V4Logits::kLast);

 private:
  void RunChunk(V4SequenceState& s, std::span<const int32_t> ids, float* logits, V4Logits which);
  // Attention sublayer of layer l for T tokens a [T, D] at positions p0..p0+T-1 -> out [T, D].
  void Attention(int l, V4LayerState& st, int64_t p0, int64_t T, const float* a, float* out);
  // Feeds T tokens' compressor projections into the state; emits complete groups' entries.
  void Compress(const V4Compressor& w, int ratio, int64_t d, bool indexer, V4CompressorState& cs,
                int64_t p0, int64_t T, const float* a, std::vector<float>& entries);
  // Indexer scores of query position P over entries [0, n) -> chosen entries (<= topk).
  void IndexSelect(const V4LayerState& st, const float* iq, const float* iw, int64_t n,
                   std::vector<int32_t>* chosen) const;
  void Moe(int l, int64_t T, const int32_t* ids, const float* x, float* out);
  // HC pre: X [T, M, D] -> y [T, D] and each token's mix.
  void HcPre(const V4Hc& hc, int64_t T, const float* X, float* y, std::vector<HcMix>* mix);

  const V4Weights& w_;
  const V4Config& c_;
  ThreadPool& pool_;
  std::vector<double> freqs_plain_, freqs_compressed_;
};

}  // namespace epserve::v4
