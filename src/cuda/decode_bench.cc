#include "cuda/decode_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "base/timer.h"
#include "cuda/cuda_model.h"
#include "cuda/device_weights.h"
#include "cuda/synthetic.h"

namespace epserve::cuda {

namespace {

std::string Gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  return buf;
}

// The best of several timed device-to-device copies: (read + written bytes) / time, GB/s.
StatusOr<double> MeasureHbm(double gib) {
  const int64_t bytes = static_cast<int64_t>(gib * (1 << 30)) / 256 * 256;
  DeviceBuffer src, dst;
  RETURN_IF_ERROR(src.Allocate(bytes, "the bandwidth probe's source"));
  RETURN_IF_ERROR(dst.Allocate(bytes, "the bandwidth probe's destination"));
  RETURN_IF_ERROR(FromCuda(cudaMemset(src.data(), 1, bytes), "clearing the bandwidth probe"));
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(FromCuda(cudaEventCreate(&start), "creating an event"));
  Status st = FromCuda(cudaEventCreate(&stop), "creating an event");
  double best_s = 0;
  for (int rep = 0; rep < 6 && st.ok(); ++rep) {  // the first is a warm-up
    st = FromCuda(cudaEventRecord(start), "timing a copy");
    if (st.ok())
      st = FromCuda(cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice),
                    "copying device to device");
    if (st.ok()) st = FromCuda(cudaEventRecord(stop), "timing a copy");
    if (st.ok()) st = FromCuda(cudaEventSynchronize(stop), "timing a copy");
    float ms = 0;
    if (st.ok()) st = FromCuda(cudaEventElapsedTime(&ms, start, stop), "timing a copy");
    if (st.ok() && rep > 0 && (best_s == 0 || ms * 1e-3 < best_s)) best_s = ms * 1e-3;
  }
  (void)cudaEventDestroy(start);
  if (stop != nullptr) (void)cudaEventDestroy(stop);
  RETURN_IF_ERROR(st);
  return 2.0 * static_cast<double>(bytes) / best_s / 1e9;
}

double MlpBytes(const DeviceMlp& m) { return m.gate.Bytes() + m.up.Bytes() + m.down.Bytes(); }

// Bytes of the weights every token reads (all but the routed experts and the LM head).
double DenseBytes(const ModelConfig& c, const DeviceWeights& w) {
  double b = 4.0 * c.hidden_size;  // final norm
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& x = w.layers[l];
    b += 4.0 * (2 * c.hidden_size + (x.q_a_norm ? c.q_lora_rank : 0) + c.kv_lora_rank);
    for (const WeightView* v : {&x.q_a, &x.q_b, &x.q, &x.kv_a, &x.kv_b, &x.o, &x.router})
      b += v->Bytes();
    b += MlpBytes(x.dense) + MlpBytes(x.shared);
    if (x.score_bias) b += 4.0 * c.n_routed_experts;
  }
  return b;
}

Status CheckOptions(const GpuDecodeBenchOptions& o) {
  if (o.batches.empty()) return Status::InvalidArgument("bench decode: no batch sizes");
  for (int b : o.batches)
    if (b < 1 || b > 4096)
      return Status::InvalidArgument("bench decode: batch sizes must be in [1, 4096], got " +
                                     std::to_string(b));
  if (o.context < 1) return Status::InvalidArgument("bench decode: --context must be at least 1");
  if (o.steps < 1) return Status::InvalidArgument("bench decode: --steps must be at least 1");
  if (o.warmup_steps < 0) return Status::InvalidArgument("bench decode: negative warm-up steps");
  if (o.block_size < 1) return Status::InvalidArgument("bench decode: block size must be >= 1");
  const int64_t positions = int64_t{o.context} + o.warmup_steps + o.steps;
  if (positions > o.config.max_position_embeddings)
    return Status::InvalidArgument(
        "bench decode: --context + steps = " + std::to_string(positions) +
        " positions exceed the model's " + std::to_string(o.config.max_position_embeddings));
  return o.config.Validate("bench decode");
}

}  // namespace

double ExpectedDistinctExperts(int num_experts, int top_k, int64_t tokens) {
  if (num_experts <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(top_k) / num_experts;
  return num_experts * (1.0 - std::pow(std::max(miss, 0.0), static_cast<double>(tokens)));
}

StatusOr<GpuDecodeBenchResult> RunGpuDecodeBench(const GpuDecodeBenchOptions& o) {
  RETURN_IF_ERROR(CheckOptions(o));
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  const ModelConfig c = o.config;
  GpuDecodeBenchResult res;
  ASSIGN_OR_RETURN(res.device, Use(o.device));
  ASSIGN_OR_RETURN(res.hbm_gbps, MeasureHbm(o.bandwidth_gib));

  // Sizes first, so a model that cannot fit says so before anything is allocated.
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t positions = int64_t{o.context} + o.warmup_steps + o.steps;
  const int64_t blocks_per_seq = (positions + o.block_size - 1) / o.block_size;
  const int64_t num_blocks = blocks_per_seq * max_batch;
  const KvBlocks shape{.num_layers = c.num_hidden_layers,
                       .row_width = c.kv_a_dim(),
                       .block_size = o.block_size,
                       .num_blocks = num_blocks,
                       .dtype = o.kv_dtype};
  res.kv_bytes = shape.ElementsPerBlock() * num_blocks * KvDTypeBytes(o.kv_dtype);
  ASSIGN_OR_RETURN(const int64_t weight_bytes, DeviceWeights::SyntheticBytes(c, o.dtype));
  {
    size_t free = 0, total = 0;
    RETURN_IF_ERROR(FromCuda(cudaMemGetInfo(&free, &total), "reading free memory"));
    const double margin = 2e9;  // activations, the logits, the matmul scratch
    if (weight_bytes + res.kv_bytes + margin > static_cast<double>(free))
      return Status::Unavailable(
          res.device.Describe() + ": the model's weights (" + Gb(weight_bytes) +
          ") and latent cache (" + Gb(res.kv_bytes) + ") need more than the " + Gb(free) +
          " free (2 GB kept for activations); use fewer layers (--layers), FP8 weights, a "
          "shorter context or smaller batches");
  }

  const double t0 = NowSeconds();
  auto progress = [&](int64_t done, int64_t total) {
    const double s = NowSeconds() - t0;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "making weights: %.1f / %.1f GB (%.0f GB/s)", done / 1e9,
                  total / 1e9, s > 0 ? done / 1e9 / s : 0.0);
    log(buf);
  };
  ASSIGN_OR_RETURN(auto weights, DeviceWeights::Synthetic(c, o.dtype, o.seed, progress));
  res.weights_seconds = NowSeconds() - t0;
  res.weight_bytes = weights->bytes;

  ASSIGN_OR_RETURN(auto kv, DeviceKvStorage::Create(c.num_hidden_layers, c.kv_a_dim(), o.block_size,
                                                    num_blocks, o.kv_dtype));
  // Every row random (std 1, the scale of a normalized c_kv); decode overwrites its own rows.
  const int64_t kv_elems = res.kv_bytes / KvDTypeBytes(o.kv_dtype);
  RETURN_IF_ERROR(
      FillUniform({.out = kv->view().data,
                   .n = kv_elems,
                   .format = o.kv_dtype == KvDType::kBF16 ? FillFormat::kBF16 : FillFormat::kF32,
                   .seed = o.seed,
                   .stream = ~uint64_t{0},
                   .half_width = std::sqrt(3.0f)},
                  nullptr));
  RETURN_IF_ERROR(FromCuda(cudaDeviceSynchronize(), "filling the latent cache"));
  ASSIGN_OR_RETURN(auto model, CudaModel::Create(c, *weights, res.device));

  std::vector<int32_t> tables(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) tables[i] = static_cast<int32_t>(i);
  for (int l = 0; l < c.num_hidden_layers; ++l) res.moe_layers += c.IsMoeLayer(l) ? 1 : 0;
  double expert_bytes = 0;
  for (const DeviceLayer& l : weights->layers)
    if (l.moe) expert_bytes = MlpBytes(l.experts[0]);
  const double dense = DenseBytes(c, *weights), head = weights->lm_head.Bytes();
  const double kv_row =
      static_cast<double>(c.kv_a_dim()) * KvDTypeBytes(o.kv_dtype) * c.num_hidden_layers;
  const int64_t V = c.vocab_size;
  std::vector<float> logits(static_cast<size_t>(max_batch) * V);

  for (int batch : o.batches) {
    ForwardBatch fb;
    for (int s = 0; s < batch; ++s)
      fb.chunks.push_back(
          {.tokens = {o.tokens == DecodeTokens::kSame ? 0 : (s * 7919 + 13) % c.vocab_size},
           .sequence_id = static_cast<uint32_t>(s),
           .start = o.context,
           .blocks = {&tables[s * blocks_per_seq], static_cast<size_t>(blocks_per_seq)}});
    std::vector<double> times;
    double kv_bytes = 0;
    for (int step = 0; step < o.warmup_steps + o.steps; ++step) {
      const double s0 = NowSeconds();
      RETURN_IF_ERROR(model->Forward(fb, kv->view(), logits.data())
                          .WithContext("decode step at batch " + std::to_string(batch)));
      const double dt = NowSeconds() - s0;
      if (!model->non_finite().empty())
        return Status::Internal("non-finite logits at batch " + std::to_string(batch) + " step " +
                                std::to_string(step));
      if (step >= o.warmup_steps) {
        times.push_back(dt);
        kv_bytes += kv_row * batch * static_cast<double>(fb.chunks[0].start + 1);
      }
      for (int s = 0; s < batch; ++s) {
        SequenceChunk& ch = fb.chunks[s];
        ch.start += 1;
        if (o.tokens == DecodeTokens::kSame) continue;
        const float* l = &logits[static_cast<size_t>(s) * V];
        ch.tokens[0] = static_cast<int32_t>(std::max_element(l, l + V) - l);
      }
    }
    GpuDecodeBenchRow r;
    r.batch = batch;
    double sum = 0;
    for (double t : times) sum += t;
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    r.step_ms = sum / o.steps * 1e3;
    r.median_step_ms = sorted[sorted.size() / 2] * 1e3;
    r.min_step_ms = sorted.front() * 1e3;
    r.tokens_per_s = batch * o.steps / sum;
    r.experts_per_layer = res.moe_layers > 0 ? ExpectedDistinctExperts(c.n_routed_experts,
                                                                       c.num_experts_per_tok, batch)
                                             : 0;
    r.dense_bytes = dense + 2.0 * batch * c.hidden_size;  // + the embedding rows (BF16)
    r.routed_bytes = r.experts_per_layer * expert_bytes * res.moe_layers;
    r.lm_head_bytes = head;
    r.kv_bytes = kv_bytes / o.steps;
    r.achieved_gbps = r.total_bytes() / (r.step_ms * 1e-3) / 1e9;
    r.median_gbps = r.total_bytes() / (r.median_step_ms * 1e-3) / 1e9;
    res.rows.push_back(r);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "batch %d: %.2f ms per step", batch, r.step_ms);
    log(buf);
  }
  return res;
}

}  // namespace epserve::cuda
