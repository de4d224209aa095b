#include "runtime/ep_stats.h"

#include <algorithm>
#include <cstdio>
#include <cstdarg>
#include <cstring>

namespace epserve {

namespace {

constexpr int kNumTimes = 7;
const char* kTimeNames[kNumTimes] = {"attention", "GEMM", "GroupGEMM", "shared", "dispatch", "combine", "other"};

struct RankStats {
  double times[kNumTimes] = {};
  std::vector<EpLayerStats> layers;
};

void Put(std::string& s, const void* p, size_t n) { s.append(static_cast<const char*>(p), n); }

RankStats Parse(const std::string& b, int num_layers, int num_experts) {
  RankStats r;
  const char* p = b.data();
  std::memcpy(r.times, p, sizeof(r.times));
  p += sizeof(r.times);
  r.layers.resize(num_layers);
  for (auto& l : r.layers) {
    std::memcpy(&l.dispatch, p, sizeof(l.dispatch));
    p += sizeof(l.dispatch);
    std::memcpy(&l.combine, p, sizeof(l.combine));
    p += sizeof(l.combine);
    std::memcpy(&l.rows_received, p, 8);
    p += 8;
    l.tokens_per_expert.resize(num_experts);
    std::memcpy(l.tokens_per_expert.data(), p, num_experts * 8);
    p += num_experts * 8;
  }
  return r;
}

std::string Fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

}  // namespace

std::string SerializeRankStats(const StepTimes& t, const EpExperts& experts, double total_seconds) {
  const EpTimes& e = experts.times();
  double times[kNumTimes] = {t.attention, t.gemm + t.gate + t.lm_head, e.group_gemm, t.shared_expert, e.dispatch,
                             e.combine, 0.0};
  double known = 0;
  for (int i = 0; i < kNumTimes - 1; ++i) known += times[i];
  times[kNumTimes - 1] = std::max(0.0, total_seconds - known);  // norms, RoPE, TP all-gathers, waits
  std::string s;
  Put(s, times, sizeof(times));
  for (const auto& l : experts.layer_stats()) {
    Put(s, &l.dispatch, sizeof(l.dispatch));
    Put(s, &l.combine, sizeof(l.combine));
    Put(s, &l.rows_received, 8);
    Put(s, l.tokens_per_expert.data(), l.tokens_per_expert.size() * 8);
  }
  return s;
}

std::string FormatStats(const std::vector<std::string>& blobs, const std::vector<int>& node_of,
                        const ModelConfig& c) {
  const int n = static_cast<int>(blobs.size()), L = c.num_hidden_layers, E = c.n_routed_experts;
  std::vector<RankStats> ranks;
  for (const auto& b : blobs) ranks.push_back(Parse(b, L, E));
  std::string out = "traffic per MoE layer (all ranks; rows = token copies, MB = dispatch + combine bytes)\n";
  out += Fmt("%6s %10s %10s %10s %10s %10s %10s\n", "layer", "rows:rank", "rows:node", "rows:other", "MB:rank", "MB:node",
             "MB:other");
  int64_t tot[6] = {};
  for (int l = 0; l < L; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    int64_t v[6] = {};
    for (const auto& r : ranks) {
      const auto& s = r.layers[l];
      v[0] += s.dispatch.rows_self, v[1] += s.dispatch.rows_node, v[2] += s.dispatch.rows_remote;
      v[3] += s.dispatch.bytes_self + s.combine.bytes_self;
      v[4] += s.dispatch.bytes_node + s.combine.bytes_node;
      v[5] += s.dispatch.bytes_remote + s.combine.bytes_remote;
    }
    for (int i = 0; i < 6; ++i) tot[i] += v[i];
    out += Fmt("%6d %10lld %10lld %10lld %10.3f %10.3f %10.3f\n", l, (long long)v[0], (long long)v[1], (long long)v[2],
               v[3] / 1e6, v[4] / 1e6, v[5] / 1e6);
  }
  out += Fmt("%6s %10lld %10lld %10lld %10.3f %10.3f %10.3f\n", "total", (long long)tot[0], (long long)tot[1],
             (long long)tot[2], tot[3] / 1e6, tot[4] / 1e6, tot[5] / 1e6);

  out += "\ntoken copies received per rank (all MoE layers)\n";
  std::vector<int64_t> per_expert(E, 0);
  for (int r = 0; r < n; ++r) {
    int64_t rows = 0;
    for (const auto& s : ranks[r].layers) {
      rows += s.rows_received;
      for (int e = 0; e < E; ++e) per_expert[e] += s.tokens_per_expert[e];
    }
    out += Fmt("  rank %d (machine %d): %lld\n", r, node_of[r], (long long)rows);
  }
  out += "tokens per expert (all MoE layers):";
  for (int e = 0; e < E; ++e) out += Fmt("%s%lld", e % 16 == 0 ? "\n  " : " ", (long long)per_expert[e]);
  out += "\n\ntime per rank, ms (prefill + decode)\n";
  out += Fmt("%6s", "rank");
  for (const char* name : kTimeNames) out += Fmt(" %10s", name);
  out += "\n";
  double mx[kNumTimes] = {};
  for (int r = 0; r < n; ++r) {
    out += Fmt("%6d", r);
    for (int i = 0; i < kNumTimes; ++i) {
      out += Fmt(" %10.2f", ranks[r].times[i] * 1e3);
      mx[i] = std::max(mx[i], ranks[r].times[i]);
    }
    out += "\n";
  }
  out += Fmt("%6s", "max");
  for (int i = 0; i < kNumTimes; ++i) out += Fmt(" %10.2f", mx[i] * 1e3);
  return out + "\n";
}

}  // namespace epserve
