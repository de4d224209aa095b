// The seam between the engine and a model family (docs/architecture.md, "The model-family
// seam"): the plain-data batch of one step (ForwardBatch: each sequence's new tokens, its
// position and block table), and ForwardPass, the interface the engine, the lock-step drivers
// and the benchmarks call. DeepSeek-V2/V3/V3.2 (model/model.h's Model) and DeepSeek-V4
// (model/v4/v4_paged_model.h) each implement it in their own files; the engine, the block pool,
// the scheduler and the serving stack above it know no family.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/matmul.h"
#include "model/kv_cache.h"

namespace epserve {

// One sequence's new tokens for this step. They occupy positions
// [start, start + tokens.size()); rows [0, start) are already in the cache.
struct SequenceChunk {
  int slot = 0;  // only for Forward(batch, LatentKvCache&): that overload fills start and blocks
  std::vector<int32_t> tokens;
  uint32_t sequence_id = 0;  // the request's id, for traces and routing keys
  int64_t start = 0;
  // Block table covering at least positions [0, start + tokens.size()); must stay valid for the
  // duration of Forward.
  std::span<const int32_t> blocks;
  // Whether the chunk's last token produces a logits row (a prompt's last chunk, a decode).
  bool want_logits = true;
  // With want_logits: how many of the chunk's last tokens produce logits rows (2 when a
  // speculative decode verifies a draft token). 1 <= num_logits <= tokens.size().
  int num_logits = 1;
};

struct ForwardBatch {
  std::vector<SequenceChunk> chunks;
};

// Called for each MoE layer with the batch's routing decisions (for traces and stats), with each
// token's sequence id and position.
struct RouteEvent {
  int layer = 0;
  int64_t num_tokens = 0;
  int top_k = 0;
  const int32_t* expert_ids = nullptr;  // [num_tokens, top_k]
  const float* weights = nullptr;       // [num_tokens, top_k]
  const uint32_t* sequence_ids = nullptr;
  const int64_t* positions = nullptr;
};
using RouteObserver = std::function<void(const RouteEvent& event)>;

// Where a chunk's hidden state first went NaN or infinite in a Forward (broken weights, an
// overflow). Generation of that sequence must stop: everything after it is garbage.
struct NonFiniteActivation {
  size_t chunk = 0;       // index into ForwardBatch::chunks
  int layer = -1;         // -1: the embedding rows
  const char* part = "";  // "embedding", "attention", "moe" or "mlp": whose output it was
  int64_t position = 0;   // the token's position in its sequence
  bool nan = true;        // NaN, else an infinity
  // "layer 3 (moe): non-finite activation (NaN) at token position 5"
  std::string Message() const;
};

// How a MoE layer overlaps its expert exchange with compute (SPEC §5). Every mode gives the same
// bits for every token: only the order of the work changes.
enum class Overlap : uint8_t {
  kNone,        // dispatch, routed experts, combine, then the shared expert: nothing overlaps
  kDispatch,    // the shared expert runs while the dispatch travels
  kMicroBatch,  // two half batches 3 stages apart through the 5-stage layer (model.h)
};
const char* OverlapName(Overlap mode);                    // "none" | "dispatch" | "microbatch"
StatusOr<Overlap> ParseOverlap(const std::string& name);  // the error names the value

struct OverlapOptions {
  Overlap mode = Overlap::kDispatch;
  // kMicroBatch only: split a step only when its largest DP group batch (tokens, agreed over
  // the ranks with ExpertBackend::AgreeMax, one small collective per step) is at least this;
  // smaller steps run as kDispatch. <= 1: always split, no collective. `--overlap auto` sets it
  // to the planner's crossover.
  int64_t min_tokens = 0;
};

// How a family's cache rows are laid out in the block pool (KvBlockStorage's arguments): every
// position contributes one row of row_width elements per cache layer, so block allocation,
// prefix reuse, preemption and chunked prefill are the same for every family.
struct KvLayout {
  int num_layers = 0;
  int row_width = 0;
  int index_bytes = 0;  // V3.2's indexer key at the end of each row (KvBlocks::index_bytes)
};

// What the engine asks of a model family's forward pass.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;

  // "DeepSeek-V3 (61 layers, ...)", for messages.
  virtual std::string Describe() const = 0;
  virtual int vocab_size() const = 0;
  // The longest sequence (prompt + generated) the model takes.
  virtual int64_t max_positions() const = 0;
  // MTP modules the forward pass can run as drafts (0: `--mtp on` is refused).
  virtual int num_mtp_layers() const = 0;
  // Whether an engine with these options can run this family; the error names the option.
  virtual Status CheckEngineOptions(KvDType kv_dtype, bool mtp, const OverlapOptions& overlap,
                                    kernels::Compute compute) const = 0;
  // The cache this family writes (with its MTP layers when mtp).
  virtual KvLayout CacheLayout(KvDType kv_dtype, bool mtp) const = 0;

  // Runs the batch: writes each token's cache rows into its blocks of `kv` and the logits of
  // each chunk that wants them (its last num_logits tokens) to logits [rows, vocab], in chunk
  // order. A batch without tokens still runs every collective of the family's parallelism.
  // Chunks whose activations went non-finite are reported by non_finite(), not as an error.
  virtual Status Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) = 0;
  virtual const std::vector<NonFiniteActivation>& non_finite() const = 0;
  // The MTP draft pass (Model::ForwardMtp). REQUIRES: num_mtp_layers() > 0.
  virtual Status ForwardMtp(const ForwardBatch& batch, std::span<const int64_t> hidden_rows,
                            const KvBlocks& kv, float* logits) = 0;
  // Engine options, applied to the next Forward (checked by CheckEngineOptions first).
  virtual void SetKeepHidden(bool keep) = 0;
  virtual void SetOverlap(const OverlapOptions& overlap) = 0;
  virtual void SetCompute(kernels::Compute compute) = 0;
};

// The checks of a batch every family makes (no empty chunk, a valid number of logits rows,
// block tables long enough for each chunk and inside the pool, token ids in [0, vocab_size)).
// Errors are InvalidArgument naming the sequence, block or token.
Status CheckBatchShape(const ForwardBatch& batch, const KvBlocks& kv, int vocab_size);

}  // namespace epserve
