// What a forward pass moves through the model's weights, summed over the weights themselves
// (shared by `bench decode` and `bench prefill`): bytes read, or elements (multiply-adds per
// token).
#pragma once

#include "model/weights.h"

namespace epserve {

using WeightMeasure = double (*)(const WeightView&);
inline double WeightBytes(const WeightView& v) {
  return v.empty() ? 0 : static_cast<double>(v.Bytes());
}
inline double WeightElements(const WeightView& v) {
  return v.empty() ? 0 : static_cast<double>(v.rows) * v.cols;
}

inline double MlpWork(const MlpWeights& m, WeightMeasure f) {
  return m.empty() ? 0 : f(m.gate) + f(m.up) + f(m.down);
}

// Summed over every weight a token reads regardless of routing: attention (kv_b once: its W_uk
// rows absorb into the query, its W_uv rows expand the attention output; V3.2's indexer), dense
// MLPs, routers, shared experts, and the LM head.
inline double DenseWork(const ModelWeights& w, WeightMeasure f) {
  double sum = f(w.lm_head);
  for (const auto& l : w.layers) {
    const auto& a = l.attn;
    for (const WeightView* v : {&a.q_a, &a.q_b, &a.q, &a.kv_a, &a.kv_b, &a.o, &a.indexer.wq_b,
                                &a.indexer.wk, &a.indexer.weights_proj})
      sum += f(*v);
    sum += MlpWork(l.dense, f);
    if (l.moe) sum += f(l.moe->router) + MlpWork(l.moe->shared, f);
  }
  return sum;
}

}  // namespace epserve
