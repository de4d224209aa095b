#include "cuda/cuda_model.h"

#include <array>
#include <cmath>
#include <cstring>

#include "cuda/ops.h"

namespace epserve::cuda {

// Device buffers of one step, grown as batches grow (never shrunk).
struct CudaModel::Buffers {
  DeviceBuffer tokens, pos, token_block, table_offset, tables, rope;
  DeviceBuffer x, xn, q_a, q, kv_a, q_pe, q_abs, o_lat, o, attn_out, ffn_out, shared_out;
  DeviceBuffer mlp_gate, mlp_up, router_logits, ids, weights, pair_row, expert_offsets, packed_x,
      packed_gate, packed_up, packed_y, last_rows, last, logits, matmul_scratch, grouped_scratch;
  // Per MoE layer: the gate, up and down matrices of its experts as device tables (made once in
  // Create; empty for dense layers), and the device memory holding them.
  std::vector<std::array<ExpertWeightTable, 3>> expert_tables;
  std::vector<DeviceBuffer> expert_table_storage;
  std::vector<int32_t> h_tokens, h_token_block, h_tables;
  std::vector<int64_t> h_pos, h_table_offset, h_pair_row, h_last_row;
  std::vector<MatMulProblem> problems;
  int64_t T = 0;
};

namespace {

template <typename T>
Status Stage(DeviceBuffer& d, const std::vector<T>& h, cudaStream_t stream, const char* what) {
  RETURN_IF_ERROR(d.Reserve(static_cast<int64_t>(std::max<size_t>(h.size(), 1) * sizeof(T)), what));
  return CopyToDevice(d.data(), h.data(), static_cast<int64_t>(h.size() * sizeof(T)), stream, what);
}

Status Floats(DeviceBuffer& d, int64_t n, const char* what) {
  return d.Reserve(std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(float)), what);
}

}  // namespace

StatusOr<std::unique_ptr<DeviceKvStorage>> DeviceKvStorage::Create(int num_layers, int row_width,
                                                                   int64_t block_size,
                                                                   int64_t num_blocks,
                                                                   KvDType dtype) {
  auto s = std::unique_ptr<DeviceKvStorage>(new DeviceKvStorage());
  s->view_ = {.num_layers = num_layers,
              .row_width = row_width,
              .block_size = block_size,
              .num_blocks = num_blocks,
              .dtype = dtype};
  const int64_t bytes = s->view_.ElementsPerBlock() * num_blocks * KvDTypeBytes(dtype);
  RETURN_IF_ERROR(s->bytes_.Allocate(bytes, "the latent KV cache (" + std::to_string(num_blocks) +
                                                " blocks of " + std::to_string(block_size) + ")"));
  RETURN_IF_ERROR(FromCuda(cudaMemset(s->bytes_.data(), 0, bytes), "clearing the KV cache"));
  s->view_.data = s->bytes_.data();
  return s;
}

CudaModel::CudaModel(const ModelConfig& config, const DeviceWeights& weights,
                     const DeviceInfo& device)
    : config_(config),
      weights_(weights),
      device_(device),
      rope_(config),
      b_(std::make_unique<Buffers>()) {}

CudaModel::~CudaModel() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

StatusOr<std::unique_ptr<CudaModel>> CudaModel::Create(const ModelConfig& config,
                                                       const DeviceWeights& weights,
                                                       const DeviceInfo& device) {
  if (config.sparse.enabled())
    return Status::InvalidArgument(
        "sparse attention (DeepSeek-V3.2's indexer) does not run on the CUDA backend yet");
  if (config.n_routed_experts > 256)
    return Status::InvalidArgument(
        "the CUDA gate handles up to 256 routed experts, the model has " +
        std::to_string(config.n_routed_experts));
  auto m = std::unique_ptr<CudaModel>(new CudaModel(config, weights, device));
  RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithFlags(&m->stream_, cudaStreamNonBlocking),
                           "creating the model's stream"));
  // The experts' weights as device tables, so a MoE layer's problem list is made on the device.
  Buffers& b = *m->b_;
  b.expert_tables.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const DeviceLayer& lw = weights.layers[l];
    if (!lw.moe) continue;
    if (static_cast<int>(lw.experts.size()) != config.n_routed_experts)
      return Status::InvalidArgument("layer " + std::to_string(l) + " holds " +
                                     std::to_string(lw.experts.size()) + " experts, not " +
                                     std::to_string(config.n_routed_experts));
    std::vector<WeightView> views(lw.experts.size());
    const std::array<WeightView DeviceMlp::*, 3> matrices = {&DeviceMlp::gate, &DeviceMlp::up,
                                                             &DeviceMlp::down};
    for (int i = 0; i < 3; ++i) {
      for (size_t e = 0; e < lw.experts.size(); ++e) views[e] = lw.experts[e].*matrices[i];
      b.expert_table_storage.emplace_back();
      RETURN_IF_ERROR(MakeExpertWeightTable(views.data(), static_cast<int>(views.size()),
                                            b.expert_table_storage.back(), &b.expert_tables[l][i])
                          .WithContext("layer " + std::to_string(l) + " experts"));
    }
  }
  return m;
}

Status CudaModel::Prepare(const ForwardBatch& batch, const KvBlocks& kv) {
  const ModelConfig& c = config_;
  Buffers& b = *b_;
  b.h_tokens.clear();
  b.h_pos.clear();
  b.h_token_block.clear();
  b.h_table_offset.clear();
  b.h_tables.clear();
  int64_t max_pos = 0;
  for (const SequenceChunk& ch : batch.chunks) {
    const int64_t end = ch.start + static_cast<int64_t>(ch.tokens.size());
    if (ch.tokens.empty())
      return Status::InvalidArgument("empty chunk for sequence " + std::to_string(ch.sequence_id));
    if (ch.want_logits && (ch.num_logits < 1 || ch.num_logits > static_cast<int>(ch.tokens.size())))
      return Status::InvalidArgument("sequence " + std::to_string(ch.sequence_id) +
                                     ": bad number of logits rows");
    if (ch.start < 0 || end > static_cast<int64_t>(ch.blocks.size()) * kv.block_size)
      return Status::InvalidArgument("sequence " + std::to_string(ch.sequence_id) + " needs " +
                                     std::to_string(end) + " positions; its block table holds " +
                                     std::to_string(ch.blocks.size() * kv.block_size));
    for (int32_t blk : ch.blocks)
      if (blk < 0 || blk >= kv.num_blocks)
        return Status::InvalidArgument("sequence " + std::to_string(ch.sequence_id) + ": block " +
                                       std::to_string(blk) + " outside the pool of " +
                                       std::to_string(kv.num_blocks));
    const int64_t table_at = static_cast<int64_t>(b.h_tables.size());
    b.h_tables.insert(b.h_tables.end(), ch.blocks.begin(), ch.blocks.end());
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      if (ch.tokens[i] < 0 || ch.tokens[i] >= c.vocab_size)
        return Status::InvalidArgument("token id " + std::to_string(ch.tokens[i]) +
                                       " out of range [0, " + std::to_string(c.vocab_size) + ")");
      const int64_t p = ch.start + static_cast<int64_t>(i);
      b.h_tokens.push_back(ch.tokens[i]);
      b.h_pos.push_back(p);
      b.h_token_block.push_back(ch.blocks[p / kv.block_size]);
      b.h_table_offset.push_back(table_at);
    }
    max_pos = std::max(max_pos, end);
  }
  b.T = static_cast<int64_t>(b.h_tokens.size());
  RETURN_IF_ERROR(Stage(b.tokens, b.h_tokens, stream_, "token ids"));
  RETURN_IF_ERROR(Stage(b.pos, b.h_pos, stream_, "positions"));
  RETURN_IF_ERROR(Stage(b.token_block, b.h_token_block, stream_, "token blocks"));
  RETURN_IF_ERROR(Stage(b.table_offset, b.h_table_offset, stream_, "block table offsets"));
  RETURN_IF_ERROR(Stage(b.tables, b.h_tables, stream_, "block tables"));
  if (max_pos > rope_uploaded_) {
    // The RoPE table grows in powers of two so a long decode re-uploads it rarely.
    int64_t n = std::max<int64_t>(rope_uploaded_, 256);
    while (n < max_pos) n *= 2;
    rope_.EnsurePositions(n);
    const std::vector<float> table(rope_.Row(0), rope_.Row(0) + n * c.qk_rope_head_dim);
    RETURN_IF_ERROR(Stage(b.rope, table, stream_, "the RoPE table"));
    rope_uploaded_ = n;
  }
  const int64_t T = b.T, H = c.hidden_size;
  RETURN_IF_ERROR(Floats(b.x, T * H, "hidden states"));
  return EmbedRows(weights_.embed, b.tokens.as<int32_t>(), T, b.x.as<float>(), stream_);
}

Status CudaModel::Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits,
                          std::vector<NonFiniteActivation>* non_finite) {
  RETURN_IF_ERROR(Forward(batch, kv, logits));
  non_finite->insert(non_finite->end(), non_finite_.begin(), non_finite_.end());
  return Status::Ok();
}

Status CudaModel::Forward(const ForwardBatch& batch, const KvBlocks& kv, float* logits) {
  const ModelConfig& c = config_;
  if ((kv.num_layers != c.num_hidden_layers &&
       kv.num_layers != c.num_hidden_layers + c.num_nextn_predict_layers) ||
      kv.row_width != c.kv_a_dim())
    return Status::InvalidArgument("KV cache of " + std::to_string(kv.num_layers) + " layers x " +
                                   std::to_string(kv.row_width) + " does not fit the model");
  RETURN_IF_ERROR(Prepare(batch, kv));
  Buffers& b = *b_;
  const int64_t T = b.T, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  RETURN_IF_ERROR(Floats(b.xn, T * H, "normed hidden states"));
  RETURN_IF_ERROR(Floats(b.ffn_out, T * H, "MLP output"));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& lw = weights_.layers[l];
    RETURN_IF_ERROR(RmsNorm({.x = b.x.as<float>(),
                             .rows = T,
                             .n = H,
                             .weight = lw.input_norm,
                             .eps = eps,
                             .out = b.xn.as<float>()},
                            stream_));
    RETURN_IF_ERROR(Attention(l, kv).WithContext("layer " + std::to_string(l) + " attention"));
    RETURN_IF_ERROR(Add(b.attn_out.as<float>(), T * H, b.x.as<float>(), stream_));
    RETURN_IF_ERROR(RmsNorm({.x = b.x.as<float>(),
                             .rows = T,
                             .n = H,
                             .weight = lw.post_norm,
                             .eps = eps,
                             .out = b.xn.as<float>()},
                            stream_));
    if (lw.moe)
      RETURN_IF_ERROR(Moe(l).WithContext("layer " + std::to_string(l) + " MoE"));
    else
      RETURN_IF_ERROR(Mlp(lw.dense, b.xn.as<float>(), T, b.ffn_out.as<float>())
                          .WithContext("layer " + std::to_string(l) + " MLP"));
    RETURN_IF_ERROR(Add(b.ffn_out.as<float>(), T * H, b.x.as<float>(), stream_));
  }
  return Head(batch, logits);
}

Status CudaModel::Attention(int l, const KvBlocks& kv) {
  const ModelConfig& c = config_;
  const DeviceLayer& a = weights_.layers[l];
  Buffers& b = *b_;
  const int64_t T = b.T;
  const int heads = c.num_attention_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int nope = c.qk_nope_head_dim, qhd = c.qk_head_dim(), vd = c.v_head_dim, row = c.kv_a_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  RETURN_IF_ERROR(Floats(b.q, T * heads * qhd, "queries"));
  RETURN_IF_ERROR(Floats(b.kv_a, T * row, "latent rows"));
  auto& p = b.problems;
  if (c.q_lora_rank > 0) {
    RETURN_IF_ERROR(Floats(b.q_a, T * c.q_lora_rank, "q_a"));
    p = {{.x = b.xn.as<float>(), .num_rows = T, .w = a.q_a, .y = b.q_a.as<float>()}};
    RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
    p = {{.x = b.xn.as<float>(), .num_rows = T, .w = a.kv_a, .y = b.kv_a.as<float>()}};
    RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
    RETURN_IF_ERROR(RmsNorm({.x = b.q_a.as<float>(),
                             .rows = T,
                             .n = c.q_lora_rank,
                             .weight = a.q_a_norm,
                             .eps = eps,
                             .out = b.q_a.as<float>()},
                            stream_));
    p = {{.x = b.q_a.as<float>(), .num_rows = T, .w = a.q_b, .y = b.q.as<float>()}};
    RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
  } else {
    p = {{.x = b.xn.as<float>(), .num_rows = T, .w = a.q, .y = b.q.as<float>()}};
    RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
    p = {{.x = b.xn.as<float>(), .num_rows = T, .w = a.kv_a, .y = b.kv_a.as<float>()}};
    RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
  }
  // Latent cache rows: normalized c_kv and rotated k_pe, written to this layer's blocks.
  RETURN_IF_ERROR(RmsNorm({.x = b.kv_a.as<float>(),
                           .x_stride = row,
                           .rows = T,
                           .n = L,
                           .weight = a.kv_a_norm,
                           .eps = eps,
                           .out = b.kv_a.as<float>(),
                           .out_stride = row},
                          stream_));
  RETURN_IF_ERROR(Rope({.x = b.kv_a.as<float>() + L,
                        .rows = T,
                        .row_stride = row,
                        .positions = b.pos.as<int64_t>(),
                        .table = b.rope.as<float>(),
                        .rope_dim = R},
                       stream_));
  const int64_t elem = KvDTypeBytes(kv.dtype);
  uint8_t* layer_base = static_cast<uint8_t*>(kv.data) + int64_t{l} * kv.block_size * row * elem;
  RETURN_IF_ERROR(KvWrite({.rows = b.kv_a.as<float>(),
                           .num_tokens = T,
                           .width = row,
                           .token_block = b.token_block.as<int32_t>(),
                           .token_pos = b.pos.as<int64_t>(),
                           .cache = layer_base,
                           .block_stride = kv.ElementsPerBlock(),
                           .block_size = kv.block_size,
                           .cache_bf16 = kv.dtype == KvDType::kBF16},
                          stream_));
  // Queries: q_pe rotated into its own rows, q_nope absorbed through each head's W_uk.
  RETURN_IF_ERROR(Floats(b.q_pe, T * heads * R, "q_pe"));
  RETURN_IF_ERROR(Floats(b.q_abs, T * heads * L, "absorbed queries"));
  if (T > 0)
    RETURN_IF_ERROR(
        FromCuda(cudaMemcpy2DAsync(b.q_pe.data(), R * sizeof(float), b.q.as<float>() + nope,
                                   qhd * sizeof(float), R * sizeof(float), T * heads,
                                   cudaMemcpyDeviceToDevice, stream_),
                 "copying q_pe"));
  RETURN_IF_ERROR(Rope({.x = b.q_pe.as<float>(),
                        .rows = T * heads,
                        .row_stride = R,
                        .rows_per_position = heads,
                        .positions = b.pos.as<int64_t>(),
                        .table = b.rope.as<float>(),
                        .rope_dim = R},
                       stream_));
  RETURN_IF_ERROR(MatMulT({.x = b.q.as<float>(),
                           .x_token_stride = int64_t{heads} * qhd,
                           .x_head_stride = qhd,
                           .num_tokens = T,
                           .num_heads = heads,
                           .w = a.kv_b,
                           .w_head_row_stride = nope + vd,
                           .n = nope,
                           .y = b.q_abs.as<float>(),
                           .y_token_stride = int64_t{heads} * L,
                           .y_head_stride = L},
                          stream_));
  RETURN_IF_ERROR(Floats(b.o_lat, T * heads * L, "latent attention output"));
  RETURN_IF_ERROR(MlaAttention({.num_tokens = T,
                                .num_heads = heads,
                                .kv_lora_rank = L,
                                .rope_dim = R,
                                .q_abs = b.q_abs.as<float>(),
                                .q_pe = b.q_pe.as<float>(),
                                .cache = layer_base,
                                .block_stride = kv.ElementsPerBlock(),
                                .block_size = kv.block_size,
                                .cache_bf16 = kv.dtype == KvDType::kBF16,
                                .tables = b.tables.as<int32_t>(),
                                .table_offset = b.table_offset.as<int64_t>(),
                                .token_pos = b.pos.as<int64_t>(),
                                .softmax_scale = static_cast<float>(c.SoftmaxScale()),
                                .out = b.o_lat.as<float>()},
                               stream_));
  // Values: every head's W_uv in one launch, then o_proj.
  RETURN_IF_ERROR(Floats(b.o, T * heads * vd, "attention values"));
  p.clear();
  for (int h = 0; h < heads; ++h)
    p.push_back({.x = b.o_lat.as<float>() + int64_t{h} * L,
                 .x_stride = int64_t{heads} * L,
                 .num_rows = T,
                 .w = a.kv_b.RowSlice(int64_t{h} * (nope + vd) + nope, vd),
                 .y = b.o.as<float>() + int64_t{h} * vd,
                 .y_stride = int64_t{heads} * vd});
  RETURN_IF_ERROR(MatMul(p.data(), heads, {}, b.matmul_scratch, stream_));
  RETURN_IF_ERROR(Floats(b.attn_out, T * c.hidden_size, "attention output"));
  p = {{.x = b.o.as<float>(), .num_rows = T, .w = a.o, .y = b.attn_out.as<float>()}};
  return MatMul(p.data(), 1, {}, b.matmul_scratch, stream_);
}

Status CudaModel::Mlp(const DeviceMlp& w, const float* x, int64_t rows, float* out) {
  Buffers& b = *b_;
  const int64_t width = w.gate.rows;
  RETURN_IF_ERROR(Floats(b.mlp_gate, rows * width, "MLP gate"));
  RETURN_IF_ERROR(Floats(b.mlp_up, rows * width, "MLP up"));
  auto& p = b.problems;
  p = {{.x = x, .num_rows = rows, .w = w.gate, .y = b.mlp_gate.as<float>()},
       {.x = x, .num_rows = rows, .w = w.up, .y = b.mlp_up.as<float>()}};
  RETURN_IF_ERROR(MatMul(p.data(), 2, {}, b.matmul_scratch, stream_));
  RETURN_IF_ERROR(SiluMul(b.mlp_gate.as<float>(), b.mlp_up.as<float>(), rows * width,
                          b.mlp_gate.as<float>(), stream_));
  p = {{.x = b.mlp_gate.as<float>(), .num_rows = rows, .w = w.down, .y = out}};
  return MatMul(p.data(), 1, {}, b.matmul_scratch, stream_);
}

Status CudaModel::Moe(int l) {
  const ModelConfig& c = config_;
  const DeviceLayer& m = weights_.layers[l];
  Buffers& b = *b_;
  const int64_t T = b.T, H = c.hidden_size;
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  auto& p = b.problems;
  // Router (f32 logits) and top-k on the device.
  RETURN_IF_ERROR(Floats(b.router_logits, T * E, "router logits"));
  p = {{.x = b.xn.as<float>(), .num_rows = T, .w = m.router, .y = b.router_logits.as<float>()}};
  RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
  RETURN_IF_ERROR(b.ids.Reserve(std::max<int64_t>(T * K, 1) * 4, "expert ids"));
  RETURN_IF_ERROR(Floats(b.weights, T * K, "expert weights"));
  RETURN_IF_ERROR(GateTopK(c.GateOpts(), b.router_logits.as<float>(), m.score_bias, T,
                           b.ids.as<int32_t>(), b.weights.as<float>(), stream_));
  // Expert-major rows, made on the device from the ids (no host round trip in the layer).
  // GateTopK writes ids in [0, E) only; ExpertLayout would drop any other (row -1, skipped by
  // GatherRows and Combine) rather than fail, so there is no range check here.
  const int64_t pairs = T * K, width = c.moe_intermediate_size;
  RETURN_IF_ERROR(b.expert_offsets.Reserve((int64_t{E} + 1) * 8, "expert offsets"));
  RETURN_IF_ERROR(b.pair_row.Reserve(std::max<int64_t>(pairs, 1) * 8, "expert rows"));
  RETURN_IF_ERROR(ExpertLayout(b.ids.as<int32_t>(), pairs, E, b.expert_offsets.as<int64_t>(),
                               b.pair_row.as<int64_t>(), stream_));
  RETURN_IF_ERROR(Floats(b.packed_x, pairs * H, "expert inputs"));
  RETURN_IF_ERROR(Floats(b.packed_gate, pairs * width, "expert gate"));
  RETURN_IF_ERROR(Floats(b.packed_up, pairs * width, "expert up"));
  RETURN_IF_ERROR(Floats(b.packed_y, pairs * H, "expert outputs"));
  RETURN_IF_ERROR(GatherRows(b.xn.as<float>(), b.pair_row.as<int64_t>(), pairs, K, H,
                             b.packed_x.as<float>(), stream_));
  // gate and up of every expert in one launch (2E problems), then down; the work items are
  // listed on the device from the offsets.
  const std::array<ExpertWeightTable, 3>& tables = b.expert_tables[l];
  RETURN_IF_ERROR(GroupedMatMul({.offsets = b.expert_offsets.as<int64_t>(),
                                 .max_rows = pairs,
                                 .x = b.packed_x.as<float>(),
                                 .num_outputs = 2,
                                 .weights = {tables[0], tables[1]},
                                 .y = {b.packed_gate.as<float>(), b.packed_up.as<float>()}},
                                b.grouped_scratch, stream_));
  RETURN_IF_ERROR(SiluMul(b.packed_gate.as<float>(), b.packed_up.as<float>(), pairs * width,
                          b.packed_gate.as<float>(), stream_));
  RETURN_IF_ERROR(GroupedMatMul({.offsets = b.expert_offsets.as<int64_t>(),
                                 .max_rows = pairs,
                                 .x = b.packed_gate.as<float>(),
                                 .num_outputs = 1,
                                 .weights = {tables[2]},
                                 .y = {b.packed_y.as<float>()}},
                                b.grouped_scratch, stream_));
  // out = (sum_k w_k y_k) + shared, in that order, as on the CPU.
  RETURN_IF_ERROR(FromCuda(cudaMemsetAsync(b.ffn_out.data(), 0, T * H * 4, stream_),
                           "clearing the MoE output"));
  RETURN_IF_ERROR(Combine(b.packed_y.as<float>(), b.pair_row.as<int64_t>(), b.weights.as<float>(),
                          T, K, H, b.ffn_out.as<float>(), stream_));
  if (m.shared.empty()) return Status::Ok();
  RETURN_IF_ERROR(Floats(b.shared_out, T * H, "shared expert output"));
  RETURN_IF_ERROR(Mlp(m.shared, b.xn.as<float>(), T, b.shared_out.as<float>()));
  return Add(b.shared_out.as<float>(), T * H, b.ffn_out.as<float>(), stream_);
}

Status CudaModel::Head(const ForwardBatch& batch, float* logits) {
  const ModelConfig& c = config_;
  Buffers& b = *b_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  // The rows that want logits, in chunk order: row r of `last` is token h_last_row[r].
  b.h_pair_row.assign(b.T, -1);
  std::vector<size_t> row_chunk;
  int64_t rows = 0, t = 0;
  for (size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const SequenceChunk& ch = batch.chunks[ci];
    t += static_cast<int64_t>(ch.tokens.size());
    if (!ch.want_logits) continue;
    for (int64_t r = t - ch.num_logits; r < t; ++r) {
      b.h_pair_row[r] = rows++;
      row_chunk.push_back(ci);
    }
  }
  non_finite_.clear();
  if (rows == 0) return FromCuda(cudaStreamSynchronize(stream_), "finishing the step");
  RETURN_IF_ERROR(Stage(b.last_rows, b.h_pair_row, stream_, "logits rows"));
  RETURN_IF_ERROR(Floats(b.last, rows * H, "last hidden rows"));
  RETURN_IF_ERROR(GatherRows(b.x.as<float>(), b.last_rows.as<int64_t>(), b.T, 1, H,
                             b.last.as<float>(), stream_));
  RETURN_IF_ERROR(RmsNorm({.x = b.last.as<float>(),
                           .rows = rows,
                           .n = H,
                           .weight = weights_.final_norm,
                           .eps = static_cast<float>(c.rms_norm_eps),
                           .out = b.last.as<float>()},
                          stream_));
  RETURN_IF_ERROR(Floats(b.logits, rows * V, "logits"));
  auto& p = b.problems;
  p = {{.x = b.last.as<float>(),
        .num_rows = rows,
        .w = weights_.lm_head,
        .y = b.logits.as<float>()}};
  RETURN_IF_ERROR(MatMul(p.data(), 1, {}, b.matmul_scratch, stream_));
  RETURN_IF_ERROR(CopyToHost(logits, b.logits.data(), rows * V * 4, stream_, "logits"));
  // A non-finite logits row fails its sequence, as the CPU's per-layer check would.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t v = 0; v < V; ++v)
      if (!std::isfinite(logits[r * V + v])) {
        const size_t ci = row_chunk[r];
        if (non_finite_.empty() || non_finite_.back().chunk != ci)
          non_finite_.push_back({.chunk = ci,
                                 .layer = c.num_hidden_layers - 1,
                                 .part = "head",
                                 .position = batch.chunks[ci].start +
                                             static_cast<int64_t>(batch.chunks[ci].tokens.size()) -
                                             1,
                                 .nan = std::isnan(logits[r * V + v])});
        break;
      }
  return Status::Ok();
}

}  // namespace epserve::cuda
