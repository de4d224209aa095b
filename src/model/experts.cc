#include "model/experts.h"

#include <algorithm>
#include <cstring>

#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace epserve {

void RunMlp(const MlpWeights& w, const float* x, int64_t rows, float* out, MlpScratch& s,
            ThreadPool& pool, kernels::Compute compute) {
  const int64_t width = w.gate.rows;
  s.gate.resize(std::max<size_t>(s.gate.size(), rows * width));
  s.up.resize(std::max<size_t>(s.up.size(), rows * width));
  const kernels::MatMulArgs gate_up[] = {
      {.x = x, .num_rows = rows, .w = w.gate, .y = s.gate.data(), .compute = compute},
      {.x = x, .num_rows = rows, .w = w.up, .y = s.up.data(), .compute = compute}};
  kernels::MatMulBatch(gate_up, pool);
  if (w.swiglu_limit > 0) {
    const float lim = w.swiglu_limit;
    for (int64_t i = 0; i < rows * width; ++i) {
      s.gate[i] = std::min(s.gate[i], lim);
      s.up[i] = std::min(std::max(s.up[i], -lim), lim);
    }
  }
  kernels::SiluMul(s.gate.data(), s.up.data(), rows * width, s.gate.data());
  kernels::MatMul({.x = s.gate.data(), .num_rows = rows, .w = w.down, .y = out, .compute = compute},
                  pool);
}

Status RunGroupedExperts(const GroupedExpertsArgs& a, MlpScratch& scratch, ThreadPool& pool) {
  // One grouped kernel call for all groups: two parallel passes instead of three matmuls per
  // expert, each thread streaming its own share of the touched experts. Only groups with rows
  // are passed on (a decode step touches a few of hundreds of experts).
  std::vector<kernels::ExpertMlpWeights> weights;
  std::vector<int64_t> offsets{a.offsets[0]};
  int64_t width = 0;
  float limit = 0;
  for (int g = 0; g < a.num_groups; ++g) {
    const int64_t rows = a.offsets[g + 1] - a.offsets[g];
    if (rows == 0) continue;
    const int e = a.group_expert[g];
    const MlpWeights& w = (*a.experts)[e];
    if (w.empty())
      return Status::Internal("expert " + std::to_string(e) + " is not loaded on this rank");
    weights.push_back({.gate = w.gate, .up = w.up, .down = w.down});
    offsets.push_back(a.offsets[g + 1]);
    width = w.gate.rows;
    limit = w.swiglu_limit;
  }
  if (width == 0) return Status::Ok();
  const int64_t rows = offsets.back();
  scratch.gate.resize(std::max<size_t>(scratch.gate.size(), rows * width));
  kernels::GroupedMlp({.num_groups = static_cast<int>(weights.size()),
                       .experts = weights.data(),
                       .offsets = offsets.data(),
                       .x = a.x,
                       .h = scratch.gate.data(),
                       .out = a.out,
                       .compute = a.compute,
                       .swiglu_limit = limit},
                      pool);
  return Status::Ok();
}

Status LocalExperts::Start(int slot, const RoutedBatch& batch) {
  if (slot < 0 || slot >= kExpertSlots) return Status::Internal("expert slot out of range");
  slots_[slot].batch = batch;
  return Status::Ok();
}

ExpertMajorLayout LayoutExpertMajor(const int32_t* expert_ids, int64_t num_pairs, int num_experts) {
  ExpertMajorLayout l;
  l.offsets.assign(num_experts + 1, 0);
  for (int64_t i = 0; i < num_pairs; ++i)
    if (expert_ids[i] >= 0) l.offsets[expert_ids[i] + 1]++;
  for (int e = 0; e < num_experts; ++e) l.offsets[e + 1] += l.offsets[e];
  std::vector<int64_t> fill(l.offsets.begin(), l.offsets.end() - 1);
  l.pair_row.assign(num_pairs, -1);
  for (int64_t i = 0; i < num_pairs; ++i)
    if (expert_ids[i] >= 0) l.pair_row[i] = fill[expert_ids[i]]++;
  l.group_expert.resize(num_experts);
  for (int e = 0; e < num_experts; ++e) l.group_expert[e] = e;
  return l;
}

Status LocalExperts::Compute(int slot) {
  Slot& sl = slots_[slot];
  const RoutedBatch& b = sl.batch;
  const auto& experts = table_.RoutedExperts(b.layer);
  const int num_experts = static_cast<int>(experts.size());
  const int64_t slots = b.num_tokens * b.top_k;
  sl.layout = LayoutExpertMajor(b.expert_ids, slots, num_experts);
  sl.packed_x.resize(slots * b.hidden);
  sl.packed_y.resize(slots * b.hidden);
  for (int64_t i = 0; i < slots; ++i) {
    float* row = &sl.packed_x[sl.layout.pair_row[i] * b.hidden];
    std::memcpy(row, b.x + (i / b.top_k) * b.hidden, b.hidden * sizeof(float));
    if (format_ == ExpertInputFormat::kFp8) kernels::RoundTripFp8(row, b.hidden, ue8m0_);
  }
  return RunGroupedExperts({.experts = &experts,
                            .group_expert = sl.layout.group_expert.data(),
                            .offsets = sl.layout.offsets.data(),
                            .num_groups = num_experts,
                            .x = sl.packed_x.data(),
                            .out = sl.packed_y.data(),
                            .compute = b.compute},
                           scratch_, pool_);
}

Status LocalExperts::Finish(int slot, float* out) {
  const Slot& sl = slots_[slot];
  const RoutedBatch& b = sl.batch;
  // Weighted sum in (token, k) order: deterministic.
  for (int64_t i = 0; i < b.num_tokens * b.top_k; ++i)
    kernels::Axpy(b.weights[i], &sl.packed_y[sl.layout.pair_row[i] * b.hidden], b.hidden,
                  out + (i / b.top_k) * b.hidden);
  return Status::Ok();
}

}  // namespace epserve
