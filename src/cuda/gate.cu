// Top-k expert routing on the device (twin: kernels::GateTopK in src/kernels/gate.cc). One
// thread per token runs the twin's rule step by step on local arrays (num_experts <= 256):
// sigmoid or softmax scores, the selection score (plus bias for noaux_tc), group filtering
// (noaux_tc: sum of the group's two best; group_limited_greedy: its best), then top_k argmax
// passes with ties to the lower index, and the normalisation and routed scaling factor.
// To pick the same experts as the CPU on the same logits, every float operation is the same
// one in the same order, and exp is taken in double and rounded to float (the correctly
// rounded expf the host's libm gives in practice), so scores are bit-equal to the host's.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda/ops.h"

namespace epserve::cuda {

namespace {

using kernels::GateOptions;
using kernels::ScoringFunc;
using kernels::TopkMethod;

constexpr int kMaxExperts = 256;
constexpr int kThreads = 128;

__device__ __forceinline__ float ExpF(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

// Index of the largest of v[0, n) with allowed[i] (all when null); ties to the lower index.
__device__ int ArgMax(const float* v, const bool* allowed, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if ((allowed == nullptr || allowed[i]) && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

__global__ void __launch_bounds__(kThreads)
    GateKernel(GateOptions opt, const float* logits, const float* bias, int64_t num_tokens,
               int32_t* expert_ids, float* weights) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= num_tokens) return;
  const int n = opt.num_experts;
  const float* x = logits + t * n;
  float scores[kMaxExperts], choice[kMaxExperts];
  bool allowed[kMaxExperts];

  if (opt.scoring == ScoringFunc::kSigmoid) {
    for (int i = 0; i < n; ++i) scores[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, ExpF(-x[i])));
  } else {  // as kernels::Softmax: f32 exp of x - max, double sum, f32 scale
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = fmaxf(mx, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      scores[i] = ExpF(__fsub_rn(x[i], mx));
      sum += scores[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int i = 0; i < n; ++i) scores[i] = __fmul_rn(scores[i], inv);
  }
  const bool add_bias = opt.method == TopkMethod::kNoauxTc && bias != nullptr;
  for (int i = 0; i < n; ++i) choice[i] = __fadd_rn(scores[i], add_bias ? bias[i] : 0.0f);

  if (opt.method != TopkMethod::kGreedy && opt.num_groups > 1) {
    const int per = n / opt.num_groups;
    float group_score[kMaxExperts];
    bool group_kept[kMaxExperts];
    for (int g = 0; g < opt.num_groups; ++g) {
      const float* c = choice + g * per;
      group_kept[g] = false;
      if (opt.method == TopkMethod::kNoauxTc) {  // sum of the two best
        const int a = ArgMax(c, nullptr, per);
        float second = -INFINITY;
        for (int i = 0; i < per; ++i)
          if (i != a && c[i] > second) second = c[i];
        group_score[g] = __fadd_rn(c[a], per > 1 ? second : 0.0f);
      } else {  // group_limited_greedy: the best
        group_score[g] = c[ArgMax(c, nullptr, per)];
      }
    }
    for (int r = 0; r < opt.topk_groups; ++r) {
      int best = -1;
      for (int g = 0; g < opt.num_groups; ++g)
        if (!group_kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
      group_kept[best] = true;
    }
    for (int i = 0; i < n; ++i) allowed[i] = group_kept[i / per];
  } else {
    for (int i = 0; i < n; ++i) allowed[i] = true;
  }

  int32_t* ids = expert_ids + t * opt.top_k;
  float* w = weights + t * opt.top_k;
  double sum = 0.0;
  for (int k = 0; k < opt.top_k; ++k) {
    const int best = ArgMax(choice, allowed, n);
    allowed[best] = false;
    ids[k] = best;
    w[k] = scores[best];
    sum += scores[best];
  }
  const float norm =
      (opt.norm_topk_prob && opt.top_k > 1) ? static_cast<float>(1.0 / (sum + 1e-20)) : 1.0f;
  const float factor = __fmul_rn(norm, opt.routed_scaling_factor);
  for (int k = 0; k < opt.top_k; ++k) w[k] = __fmul_rn(w[k], factor);
}

}  // namespace

Status GateTopK(const GateOptions& opt, const float* logits, const float* bias, int64_t num_tokens,
                int32_t* expert_ids, float* weights, cudaStream_t stream) {
  const int n = opt.num_experts;
  if (n <= 0 || n > kMaxExperts)
    return Status::InvalidArgument("GateTopK: num_experts " + std::to_string(n) +
                                   " is not in [1, " + std::to_string(kMaxExperts) + "]");
  if (opt.top_k <= 0 || opt.top_k > n)
    return Status::InvalidArgument("GateTopK: top_k " + std::to_string(opt.top_k) +
                                   " is not in [1, num_experts]");
  if (opt.method != TopkMethod::kGreedy && opt.num_groups > 1) {
    if (n % opt.num_groups != 0 || opt.topk_groups < 1 || opt.topk_groups > opt.num_groups)
      return Status::InvalidArgument("GateTopK: " + std::to_string(n) + " experts in " +
                                     std::to_string(opt.num_groups) + " groups, top " +
                                     std::to_string(opt.topk_groups) + " groups");
    if (opt.topk_groups * (n / opt.num_groups) < opt.top_k)
      return Status::InvalidArgument("GateTopK: the kept groups hold fewer than top_k experts");
  }
  if (num_tokens < 0) return Status::InvalidArgument("GateTopK: negative num_tokens");
  if (num_tokens == 0) return Status::Ok();
  if (logits == nullptr || expert_ids == nullptr || weights == nullptr)
    return Status::InvalidArgument("GateTopK: null pointer argument");
  const int64_t blocks = (num_tokens + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFF) return Status::InvalidArgument("GateTopK: too many tokens");
  GateKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(opt, logits, bias, num_tokens,
                                                                     expert_ids, weights);
  return LastLaunch("GateTopK");
}

}  // namespace epserve::cuda
