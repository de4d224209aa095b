// ModelWeights: every tensor of a checkpoint bound to its place in the model, after full
// validation (missing, extra, wrong shape, wrong dtype: one-line errors naming file and tensor).
// Matrices are views into the checkpoint's memory mapping (zero copy); norm vectors and router
// biases are converted to float32 and owned. Views stay valid as long as the Checkpoint.
// Routed experts that LoadOptions::want_expert rejects are validated but not bound (their
// views stay empty), so an expert-parallel rank never touches other ranks' expert weights.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "tensor/weight_view.h"

namespace epserve {

struct MlpWeights {
  WeightView gate, up, down;  // SwiGLU: down(silu(gate x) * up x)
  // > 0: DeepSeek-V4's clamp before the product (gate <- min(gate, limit), up <- clamp(up,
  // -limit, limit)); 0: none (V2/V3).
  float swiglu_limit = 0;
  bool empty() const { return gate.empty(); }
};

// DeepSeek-V3.2's lightning indexer (config.sparse; docs/checkpoint-format.md).
struct IndexerWeights {
  WeightView wq_b;                         // [index_n_heads * index_head_dim, q_lora]
  WeightView wk;                           // [index_head_dim, hidden]
  std::vector<float> k_norm, k_norm_bias;  // LayerNorm of the key [index_head_dim]
  WeightView weights_proj;                 // [index_n_heads, hidden]: per-head weights
  bool empty() const { return wk.empty(); }
};

struct AttentionWeights {
  WeightView q_a;                // [q_lora, hidden]; empty when q_lora_rank is null
  std::vector<float> q_a_norm;   // [q_lora]
  WeightView q_b;                // [heads * qk_head_dim, q_lora]
  WeightView q;                  // [heads * qk_head_dim, hidden] when q_lora_rank is null
  WeightView kv_a;               // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;  // [kv_lora]
  WeightView kv_b;               // [heads * (nope + v), kv_lora]: per head W_uk rows then W_uv rows
  WeightView o;                  // [hidden, heads * v]
  IndexerWeights indexer;        // empty() unless config.sparse.enabled()
};

struct MoeWeights {
  WeightView router;                // [experts, hidden]
  std::vector<float> score_bias;    // e_score_correction_bias, empty unless noaux_tc
  std::vector<MlpWeights> experts;  // [experts]; empty() for experts not loaded here
  MlpWeights shared;                // empty() when n_shared_experts == 0
};

struct LayerWeights {
  std::vector<float> input_norm, post_norm;
  AttentionWeights attn;
  MlpWeights dense;                 // dense layers only
  std::unique_ptr<MoeWeights> moe;  // MoE layers only
};

struct MtpWeights {
  std::vector<float> enorm, hnorm, head_norm;
  WeightView eh_proj, embed, head;
  LayerWeights layer;
};

struct LoadOptions {
  // Which routed experts to bind; null binds all.
  std::function<bool(int layer, int expert)> want_expert;
  // Map every bound weight that a forward pass streams (all but the embedding table, which is
  // read a row per token) into the page table at load, so no decode step pays page faults.
  bool prefault = true;
  // Where the streamed weights live: in the checkpoint's file mapping (no copy; 4 KB pages of
  // the page cache), or copied once into anonymous memory on transparent huge pages (2 MB
  // pages: far fewer TLB misses when experts scattered over the file are streamed; costs
  // their size in private memory, per rank).
  enum class Memory { kMapped, kCopied };
  Memory memory = Memory::kCopied;
  // Requantize at load (docs/kernels.md, "Int8 weights"): kInt8 turns every projection the
  // forward pass streams (attention q/kv_a/o, dense, shared and routed experts, lm_head, the
  // MTP modules') into int8 per row and 128-column block for the int8 kernel, whatever the
  // checkpoint's dtype; kv_b_proj (MLA's absorbed W_uk/W_uv) and the router stay as stored.
  // The int8 copies live in anonymous memory (as with kCopied, which it implies).
  enum class Requant { kNone, kInt8 };
  Requant requant = Requant::kNone;
  // The MTP modules (model.layers.{num_hidden_layers + i}.*, ~12 GB in DeepSeek-V3): kSkip
  // (--mtp off) neither binds nor requires nor checks their tensors, so a checkpoint converted
  // without them loads; ModelWeights::mtp then stays empty while config.num_nextn_predict_layers
  // stays what config.json says (the KV cache has MTP layers only with EngineOptions::mtp).
  enum class Mtp { kLoad, kSkip };
  Mtp mtp = Mtp::kLoad;
};

const char* RequantName(LoadOptions::Requant requant);  // "none", "int8"
StatusOr<LoadOptions::Requant> ParseRequant(const std::string& name);

struct ModelWeights {
  WeightView embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  WeightView lm_head;           // [vocab, hidden]
  std::vector<MtpWeights> mtp;  // empty with LoadOptions::Mtp::kSkip
  // LoadOptions::Mtp::kSkip: the bytes of the checkpoint's MTP-module tensors (data and
  // scales), none of them bound.
  int64_t mtp_bytes_not_loaded = 0;
  std::vector<std::vector<uint8_t>> owned;  // copies of tensors that were not aligned in the file
  std::shared_ptr<uint8_t> copied;          // LoadOptions::Memory::kCopied: the streamed weights

  // Decoder layer l: a main layer (l < layers.size()) or the block of MTP module
  // l - layers.size() (HF layout: model.layers.{num_hidden_layers + i}).
  const LayerWeights& Layer(int l) const {
    const int main = static_cast<int>(layers.size());
    return l < main ? layers[l] : mtp[l - main].layer;
  }

  static StatusOr<std::unique_ptr<ModelWeights>> Load(const Checkpoint& ckpt,
                                                      const ModelConfig& config,
                                                      const LoadOptions& options);

  // Every bound weight a forward pass streams (data and FP8 scales), in layer order; the
  // embedding table is left out. Unbound experts have no views and are not listed.
  std::vector<const WeightView*> StreamedViews() const;

  // Online re-placement (runtime/online_placer.h) binds routed experts after the load and lets
  // go of others. Memory of experts loaded that way, by (layer, expert).
  std::map<std::pair<int, int>, std::shared_ptr<uint8_t>> late_experts;
};

// One routed expert bound on its own after the load, as LoadOptions says (copied into private
// memory, requantized to int8, or a view of the prefaulted file mapping). Safe to call from a
// background thread: it reads the checkpoint and writes only its result.
struct LoadedExpert {
  int layer = 0, expert = 0;
  MlpWeights weights;
  std::shared_ptr<uint8_t> memory;  // what the views point into; null for mapped views
  int64_t bytes = 0;                // the weights' bytes (data and scales) as stored here
};
StatusOr<LoadedExpert> LoadExpert(const Checkpoint& ckpt, const ModelConfig& config, int layer,
                                  int expert, const LoadOptions& options);

// Binds a loaded expert in `w` (from the thread that runs the model, between steps).
void InstallExpert(ModelWeights& w, LoadedExpert expert);

// Unbinds routed expert (layer, expert) of `w` and returns the memory it held to the system where
// it was this rank's own (late-loaded experts; whole pages of the load-time copy). Returns the
// expert's bytes. Between steps only.
int64_t ReleaseExpert(ModelWeights& w, int layer, int expert);

}  // namespace epserve
