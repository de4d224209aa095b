#include "kernels/gate.h"

#include <cmath>
#include <limits>

#include "kernels/ops.h"

namespace epserve::kernels {

namespace {
// Index of the largest value among n with allowed[i]; ties to the lower index.
int ArgMax(const float* v, const bool* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if ((allowed == nullptr || allowed[i]) && (best < 0 || v[i] > v[best])) best = i;
  return best;
}
}  // namespace

void GateTopK(const GateOptions& opt, const float* logits, const float* bias, float* scratch,
              int32_t* expert_ids, float* weights) {
  const int n = opt.num_experts;
  float* scores = scratch;          // what the weights come from
  float* choice = scratch + n;      // what selection ranks by
  for (int i = 0; i < n; ++i) scores[i] = logits[i];
  if (opt.scoring == ScoringFunc::kSigmoid) {
    for (int i = 0; i < n; ++i) scores[i] = 1.0f / (1.0f + std::exp(-scores[i]));
  } else {
    Softmax(scores, n);
  }
  for (int i = 0; i < n; ++i) choice[i] = scores[i] + (opt.method == TopkMethod::kNoauxTc && bias ? bias[i] : 0.0f);

  // Group filtering: mask out experts of groups that are not among the topk_groups best.
  bool allowed[1024];
  bool* allowed_ptr = nullptr;
  if (opt.method != TopkMethod::kGreedy && opt.num_groups > 1) {
    const int per = n / opt.num_groups;
    float group_score[256];
    for (int g = 0; g < opt.num_groups; ++g) {
      const float* c = choice + g * per;
      if (opt.method == TopkMethod::kNoauxTc) {  // sum of the two best
        int a = ArgMax(c, nullptr, per);
        float second = -std::numeric_limits<float>::infinity();
        for (int i = 0; i < per; ++i)
          if (i != a && c[i] > second) second = c[i];
        group_score[g] = c[a] + (per > 1 ? second : 0.0f);
      } else {  // group_limited_greedy: the best
        group_score[g] = c[ArgMax(c, nullptr, per)];
      }
    }
    bool group_kept[256] = {};
    for (int r = 0; r < opt.topk_groups; ++r) {
      int best = -1;
      for (int g = 0; g < opt.num_groups; ++g)
        if (!group_kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
      group_kept[best] = true;
    }
    for (int i = 0; i < n; ++i) allowed[i] = group_kept[i / per];
    allowed_ptr = allowed;
  } else {
    for (int i = 0; i < n; ++i) allowed[i] = true;
    allowed_ptr = allowed;
  }

  double sum = 0.0;
  for (int k = 0; k < opt.top_k; ++k) {
    int best = ArgMax(choice, allowed_ptr, n);
    allowed[best] = false;
    expert_ids[k] = best;
    weights[k] = scores[best];
    sum += scores[best];
  }
  const float norm = (opt.norm_topk_prob && opt.top_k > 1) ? static_cast<float>(1.0 / (sum + 1e-20)) : 1.0f;
  for (int k = 0; k < opt.top_k; ++k) weights[k] *= norm * opt.routed_scaling_factor;
}

}  // namespace epserve::kernels
