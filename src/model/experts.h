// How the MoE layer reaches its routed experts. The model hands a batch of tokens with their
// chosen experts to an ExpertBackend in three calls, stages 3-5 of SPEC §5, so other work can
// run while tokens travel:
//   Start(slot, batch) - stage 3: begin routing (a distributed backend sends tokens here)
//   Compute(slot)      - stage 4: receive tokens, run the experts held here, send results back
//   Finish(slot, out)  - stage 5: out[t] += sum_k weight[t,k] * Expert_{id[t,k]}(x[t])
// `slot` (0 .. kExpertSlots - 1) is one exchange in flight: the two micro-batches of a MoE layer
// use one each, so both can travel at once. Calls on a slot go Start, Compute, Finish; Progress
// may come anywhere, and moves in-flight transfers forward (MPI advances them only inside its
// calls). LocalExperts computes all experts in-process; the parallel runtime provides a backend
// that dispatches to the ranks holding the experts and combines the results.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned_vector.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/weights.h"

namespace epserve {

struct RoutedBatch {
  int layer = 0;
  int64_t num_tokens = 0;
  int hidden = 0;
  int top_k = 0;
  const float* x = nullptr;              // [num_tokens, hidden]; valid until Finish returns
  const int32_t* expert_ids = nullptr;   // [num_tokens, top_k]
  const float* weights = nullptr;        // [num_tokens, top_k]
  const uint64_t* token_keys = nullptr;  // [num_tokens] placement::TokenKey(sequence, position)
  kernels::Compute compute = kernels::Compute::kExact;  // how the experts multiply
};

inline constexpr int kExpertSlots = 2;

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  virtual Status Start(int slot, const RoutedBatch& batch) = 0;
  virtual Status Compute(int slot) = 0;
  virtual Status Finish(int slot, float* out) = 0;
  virtual Status Progress() { return Status::Ok(); }
  // Whether exchanges travel between processes (Progress then has work to do).
  virtual bool HasTransfers() const { return false; }
  // The largest of `value` over every rank that shares the experts (a collective under expert
  // parallelism; the value itself in one process). Lets all ranks make the same per-step choice.
  virtual StatusOr<int64_t> AgreeMax(int64_t value) { return value; }
};

// The routed experts of each MoE layer, by expert id, as the backends read them (an expert
// this rank does not hold is empty). A model family provides one (DeepSeek-V4: v4::V4Weights);
// ModelExpertTable reads DeepSeek-V2/V3's ModelWeights, live (online re-placement binds experts
// after the load).
class ExpertTable {
 public:
  virtual ~ExpertTable() = default;
  virtual const std::vector<MlpWeights>& RoutedExperts(int layer) const = 0;
};
class ModelExpertTable final : public ExpertTable {
 public:
  explicit ModelExpertTable(const ModelWeights& weights) : weights_(weights) {}
  const std::vector<MlpWeights>& RoutedExperts(int layer) const override {
    return weights_.Layer(layer).moe->experts;
  }

 private:
  const ModelWeights& weights_;
};

// Computes a SwiGLU MLP over rows: out[r] = down(silu(gate x[r]) * up x[r]) (with the weights'
// swiglu_limit clamp).
// Scratch vectors are resized as needed.
struct MlpScratch {
  AlignedVector<float> gate, up;
};
void RunMlp(const MlpWeights& w, const float* x, int64_t rows, float* out, MlpScratch& scratch,
            ThreadPool& pool, kernels::Compute compute = kernels::Compute::kExact);

// Runs a group of experts over expert-major packed rows: rows [offsets[e], offsets[e+1]) of x
// go through expert expert_ids[e]. The building block of every backend.
struct GroupedExpertsArgs {
  const std::vector<MlpWeights>* experts = nullptr;  // by expert id
  const int32_t* group_expert = nullptr;             // [num_groups] expert id of each group
  const int64_t* offsets = nullptr;                  // [num_groups + 1]
  int num_groups = 0;
  const float* x = nullptr;  // [offsets[num_groups], hidden]
  float* out = nullptr;      // [offsets[num_groups], hidden]
  kernels::Compute compute = kernels::Compute::kExact;
};
Status RunGroupedExperts(const GroupedExpertsArgs& args, MlpScratch& scratch, ThreadPool& pool);

// How expert inputs travel: kF32 keeps them exact; kFp8 rounds them through the dispatch
// format (FP8 e4m3, one scale per 128) exactly as the expert-parallel path does, so a single
// process can reproduce a distributed run's numbers.
enum class ExpertInputFormat { kF32, kFp8 };

// Expert-major order of (row, slot) pairs, the input layout of RunGroupedExperts: pairs with an
// expert id >= 0 are grouped by expert, in pair order within an expert; pair i lands on packed
// row pair_row[i] (-1 for ids < 0), and expert e owns packed rows [offsets[e], offsets[e + 1]).
// REQUIRES: every id < num_experts.
struct ExpertMajorLayout {
  std::vector<int64_t> offsets;       // [num_experts + 1]
  std::vector<int64_t> pair_row;      // [num_pairs]
  std::vector<int32_t> group_expert;  // [num_experts]: 0, 1, ..., for GroupedExpertsArgs
};
ExpertMajorLayout LayoutExpertMajor(const int32_t* expert_ids, int64_t num_pairs, int num_experts);

class LocalExperts : public ExpertBackend {
 public:
  // ue8m0_scales: kFp8 rounds with power-of-two scales, as the dispatch does for a model whose
  // config says scale_fmt ue8m0 (DispatchOptions::ue8m0_scales).
  LocalExperts(const ModelWeights& weights, ThreadPool& pool,
               ExpertInputFormat format = ExpertInputFormat::kF32, bool ue8m0_scales = false)
      : own_table_(std::make_unique<ModelExpertTable>(weights)),
        table_(*own_table_),
        pool_(pool),
        format_(format),
        ue8m0_(ue8m0_scales) {}
  // Any family's experts (`table` must outlive this).
  LocalExperts(const ExpertTable& table, ThreadPool& pool,
               ExpertInputFormat format = ExpertInputFormat::kF32, bool ue8m0_scales = false)
      : table_(table), pool_(pool), format_(format), ue8m0_(ue8m0_scales) {}
  Status Start(int slot, const RoutedBatch& batch) override;
  Status Compute(int slot) override;
  Status Finish(int slot, float* out) override;

 private:
  struct Slot {
    RoutedBatch batch;
    ExpertMajorLayout layout;
    AlignedVector<float> packed_x, packed_y;
  };
  std::unique_ptr<ModelExpertTable> own_table_;
  const ExpertTable& table_;
  ThreadPool& pool_;
  ExpertInputFormat format_;
  bool ue8m0_;
  Slot slots_[kExpertSlots];
  MlpScratch scratch_;
};

}  // namespace epserve
