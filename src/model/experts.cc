#include "model/experts.h"

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace epserve {

void RunMlp(const MlpWeights& w, const float* x, int64_t rows, float* out, MlpScratch& s, ThreadPool& pool) {
  const int64_t width = w.gate.rows;
  s.gate.resize(std::max<size_t>(s.gate.size(), rows * width));
  s.up.resize(std::max<size_t>(s.up.size(), rows * width));
  kernels::MatMul({.x = x, .num_rows = rows, .w = w.gate, .y = s.gate.data()}, pool);
  kernels::MatMul({.x = x, .num_rows = rows, .w = w.up, .y = s.up.data()}, pool);
  kernels::SiluMul(s.gate.data(), s.up.data(), rows * width, s.gate.data());
  kernels::MatMul({.x = s.gate.data(), .num_rows = rows, .w = w.down, .y = out}, pool);
}

Status RunGroupedExperts(const GroupedExpertsArgs& a, MlpScratch& scratch, ThreadPool& pool) {
  const int64_t hidden = a.num_groups > 0 ? (*a.experts)[a.group_expert[0]].gate.cols : 0;
  for (int g = 0; g < a.num_groups; ++g) {
    const int64_t rows = a.offsets[g + 1] - a.offsets[g];
    if (rows == 0) continue;
    const int e = a.group_expert[g];
    const MlpWeights& w = (*a.experts)[e];
    if (w.empty()) return Status::Internal("expert " + std::to_string(e) + " is not loaded on this rank");
    RunMlp(w, a.x + a.offsets[g] * hidden, rows, a.out + a.offsets[g] * hidden, scratch, pool);
  }
  return Status::Ok();
}

Status LocalExperts::Start(const RoutedBatch& batch) {
  batch_ = batch;
  return Status::Ok();
}

Status LocalExperts::Finish(float* out) {
  const RoutedBatch& b = batch_;
  const auto& experts = weights_.layers[b.layer].moe->experts;
  const int num_experts = static_cast<int>(experts.size());
  const int64_t slots = b.num_tokens * b.top_k;
  // Pack (token, k) slots expert-major.
  std::vector<int64_t> offsets(num_experts + 1, 0);
  for (int64_t i = 0; i < slots; ++i) offsets[b.expert_ids[i] + 1]++;
  for (int e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1), slot_row(slots);
  packed_x_.resize(slots * b.hidden);
  packed_y_.resize(slots * b.hidden);
  for (int64_t i = 0; i < slots; ++i) {
    const int64_t row = fill[b.expert_ids[i]]++;
    slot_row[i] = row;
    std::memcpy(&packed_x_[row * b.hidden], b.x + (i / b.top_k) * b.hidden, b.hidden * sizeof(float));
  }
  std::vector<int32_t> ids(num_experts);
  for (int e = 0; e < num_experts; ++e) ids[e] = e;
  RETURN_IF_ERROR(RunGroupedExperts({.experts = &experts, .group_expert = ids.data(), .offsets = offsets.data(),
                                     .num_groups = num_experts, .x = packed_x_.data(), .out = packed_y_.data()},
                                    scratch_, pool_));
  // Weighted sum in (token, k) order: deterministic.
  for (int64_t i = 0; i < slots; ++i)
    kernels::Axpy(b.weights[i], &packed_y_[slot_row[i] * b.hidden], b.hidden, out + (i / b.top_k) * b.hidden);
  return Status::Ok();
}

}  // namespace epserve
