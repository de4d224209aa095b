#include "planner/routing.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "planner/csv.h"
#include "planner/json_util.h"

namespace epserve::planner {
namespace {

// C(a, k) / C(b, k) for a <= b, as a running product (0 when a < k).
double ChooseRatio(int a, int b, int k) {
  if (a < k) return 0;
  double ratio = 1;
  for (int i = 0; i < k; ++i) ratio *= static_cast<double>(a - i) / (b - i);
  return ratio;
}

double Choose(int n, int k) {
  if (k < 0 || k > n) return 0;
  double value = 1;
  for (int i = 1; i <= k; ++i) value = value * (n - k + i) / i;
  return value;
}

StatusOr<std::vector<int>> ParseIdList(const std::string& field, const std::string& where) {
  std::vector<int> ids;
  std::string digits;
  for (char c : field) {
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == ',' || c == ']' || c == ' ') {
      if (!digits.empty()) ids.push_back(std::stoi(digits));
      digits.clear();
    } else if (c != '[') {
      return Status::InvalidArgument(where + ": bad expert list '" + field + "'");
    }
  }
  if (!digits.empty()) ids.push_back(std::stoi(digits));
  if (ids.empty()) return Status::InvalidArgument(where + ": empty expert list");
  return ids;
}

Status AppendTrace(const std::string& text, const std::string& origin,
                   std::map<int, std::vector<uint16_t>>& layers, int& top_k, int& max_id) {
  std::vector<std::string_view> lines = SplitLines(text);
  for (size_t i = 1; i < lines.size(); ++i) {  // line 0 is the header
    const std::string where = origin + ":" + std::to_string(i + 1);
    ASSIGN_OR_RETURN(std::vector<std::string> fields, SplitCsvLine(lines[i]));
    if (fields.size() < 4) return Status::InvalidArgument(where + ": expected 4 fields");
    int layer = 0;
    try {
      layer = std::stoi(fields[0]);
    } catch (...) {
      return Status::InvalidArgument(where + ": bad layer id '" + fields[0] + "'");
    }
    ASSIGN_OR_RETURN(std::vector<int> ids, ParseIdList(fields.back(), where));
    if (top_k == 0) top_k = static_cast<int>(ids.size());
    if (static_cast<int>(ids.size()) != top_k) {
      return Status::InvalidArgument(where + ": " + std::to_string(ids.size()) +
                                     " experts, earlier rows had " + std::to_string(top_k));
    }
    std::vector<uint16_t>& out = layers[layer];
    for (int id : ids) {
      if (id < 0 || id > 65535) return Status::InvalidArgument(where + ": expert id out of range");
      max_id = std::max(max_id, id);
      out.push_back(static_cast<uint16_t>(id));
    }
  }
  return Status::Ok();
}

StatusOr<RoutingTrace> FinishTrace(std::map<int, std::vector<uint16_t>> layers, int top_k,
                                   int max_id, const std::string& origin) {
  if (layers.empty()) return Status::InvalidArgument(origin + ": routing trace has no rows");
  RoutingTrace trace;
  trace.top_k = top_k;
  trace.num_experts = max_id + 1;
  for (auto& [id, selections] : layers) {
    trace.layer_ids.push_back(id);
    trace.selections.push_back(std::move(selections));
  }
  return trace;
}

}  // namespace

StatusOr<RoutingTrace> ParseRoutingTraceCsv(const std::string& text, const std::string& origin) {
  std::map<int, std::vector<uint16_t>> layers;
  int top_k = 0;
  int max_id = -1;
  RETURN_IF_ERROR(AppendTrace(text, origin, layers, top_k, max_id));
  return FinishTrace(std::move(layers), top_k, max_id, origin);
}

StatusOr<RoutingTrace> LoadRoutingTrace(const std::string& path) {
  std::error_code error;
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path, error)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      if (entry.path().extension() == ".csv") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) return Status::NotFound(path + ": no *.csv routing trace files");
  } else {
    files.push_back(path);
  }
  std::map<int, std::vector<uint16_t>> layers;
  int top_k = 0;
  int max_id = -1;
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));
    RETURN_IF_ERROR(AppendTrace(text, file, layers, top_k, max_id));
  }
  return FinishTrace(std::move(layers), top_k, max_id, path);
}

double UniformRankHitProbability(const ModelSpec& model, int experts_per_rank, int rank_idx) {
  const int n = model.n_routed_experts;
  const int k = model.num_experts_per_tok;
  const int groups = model.n_group;
  const int kept = model.topk_group;
  const int group_size = n / groups;
  const int pool = kept * group_size;  // experts in the kept groups
  // Experts of this rank in each group it touches.
  std::vector<int> per_group;
  const int first = rank_idx * experts_per_rank;
  for (int g = first / group_size; g * group_size < first + experts_per_rank; ++g) {
    const int lo = std::max(first, g * group_size);
    const int hi = std::min(first + experts_per_rank, (g + 1) * group_size);
    per_group.push_back(hi - lo);
  }
  const int touched = static_cast<int>(per_group.size());
  const double subsets = Choose(groups, kept);
  double miss = 0;
  const bool equal =
      std::all_of(per_group.begin(), per_group.end(), [&](int c) { return c == per_group[0]; });
  if (equal || touched > 16) {
    // Hypergeometric over how many of the rank's groups are kept (unequal shares spread over more
    // than 16 groups use their mean, which keeps the enumeration below small).
    const int share = equal ? per_group[0] : (experts_per_rank + touched - 1) / touched;
    for (int j = 0; j <= std::min(touched, kept); ++j) {
      const double p_j = Choose(touched, j) * Choose(groups - touched, kept - j) / subsets;
      miss += p_j * ChooseRatio(pool - j * share, pool, k);
    }
  } else {
    // Enumerate which of the rank's (few) groups are kept.
    for (unsigned mask = 0; mask < (1u << touched); ++mask) {
      const int j = __builtin_popcount(mask);
      if (j > kept) continue;
      int local = 0;
      for (int g = 0; g < touched; ++g) {
        if (mask & (1u << g)) local += per_group[g];
      }
      const double p_mask = Choose(groups - touched, kept - j) / subsets;
      miss += p_mask * ChooseRatio(pool - local, pool, k);
    }
  }
  return 1.0 - miss;
}

StatusOr<RoutingModel> RoutingModel::Uniform(const ModelSpec& model, int ep,
                                             int ranks_per_machine) {
  if (ep <= 0 || model.n_routed_experts % ep != 0) {
    return Status::InvalidArgument("EP " + std::to_string(ep) + " does not divide the " +
                                   std::to_string(model.n_routed_experts) + " routed experts");
  }
  RoutingModel routing;
  routing.ep_ = ep;
  routing.ranks_per_machine_ = ranks_per_machine;
  routing.experts_per_rank_ = model.n_routed_experts / ep;
  routing.uniform_ = true;
  LayerStats stats;
  stats.expert_prob.assign(model.n_routed_experts,
                           static_cast<double>(model.num_experts_per_tok) / model.n_routed_experts);
  stats.rank_hit.resize(ep);
  for (int r = 0; r < ep; ++r) {
    stats.rank_hit[r] = UniformRankHitProbability(model, routing.experts_per_rank_, r);
  }
  routing.layers_.push_back(std::move(stats));
  return routing;
}

StatusOr<RoutingModel> RoutingModel::FromTrace(const RoutingTrace& trace, const ModelSpec& model,
                                               int ep, int ranks_per_machine) {
  if (trace.top_k != model.num_experts_per_tok || trace.num_experts > model.n_routed_experts) {
    return Status::InvalidArgument("routing trace has " + std::to_string(trace.num_experts) +
                                   " experts, top-" + std::to_string(trace.top_k) + ", but model " +
                                   model.name + " has " + std::to_string(model.n_routed_experts) +
                                   " experts, top-" + std::to_string(model.num_experts_per_tok));
  }
  ASSIGN_OR_RETURN(RoutingModel routing, Uniform(model, ep, ranks_per_machine));
  routing.uniform_ = false;
  routing.layers_.clear();
  const int g = routing.experts_per_rank_;
  for (size_t l = 0; l < trace.selections.size(); ++l) {
    const std::vector<uint16_t>& sel = trace.selections[l];
    const double tokens = static_cast<double>(trace.NumTokens(l));
    LayerStats stats;
    stats.expert_prob.assign(model.n_routed_experts, 0);
    stats.rank_hit.assign(ep, 0);
    std::vector<int> hit_ranks;
    for (size_t t = 0; t < sel.size(); t += trace.top_k) {
      hit_ranks.clear();
      for (int j = 0; j < trace.top_k; ++j) {
        stats.expert_prob[sel[t + j]] += 1;
        hit_ranks.push_back(sel[t + j] / g);
      }
      std::sort(hit_ranks.begin(), hit_ranks.end());
      hit_ranks.erase(std::unique(hit_ranks.begin(), hit_ranks.end()), hit_ranks.end());
      for (int r : hit_ranks) stats.rank_hit[r] += 1;
    }
    for (double& p : stats.expert_prob) p /= tokens;
    for (double& h : stats.rank_hit) h /= tokens;
    routing.layers_.push_back(std::move(stats));
  }
  return routing;
}

LayerRouting RoutingModel::Evaluate(int layer_idx, double total_tokens,
                                    double tokens_per_rank) const {
  CHECK(layer_idx >= 0 && layer_idx < num_layers()) << "routing layer " << layer_idx;
  const LayerStats& stats = layers_[layer_idx];
  LayerRouting out;
  const int num_ranks = uniform_ ? 1 : ep_;  // uniform: every rank is alike
  for (int r = 0; r < num_ranks; ++r) {
    RankRouting rank;
    for (int e = r * experts_per_rank_; e < (r + 1) * experts_per_rank_; ++e) {
      const double p = stats.expert_prob[e];
      rank.touched_experts += 1.0 - std::pow(1.0 - p, total_tokens);
      rank.rows += total_tokens * p;
    }
    out.ranks.push_back(rank);
  }
  double hit_sum = 0;
  double hit_max = 0;
  for (double h : stats.rank_hit) {
    hit_sum += h;
    hit_max = std::max(hit_max, h);
  }
  out.destinations_per_token = hit_sum;
  // Averaged over senders, a token's destinations split into itself (1/EP of the hits), the
  // other ranks of its machine ((rpm-1)/EP) and other machines ((EP-rpm)/EP).
  const double local_share = static_cast<double>(ranks_per_machine_ - 1) / ep_;
  const double remote_share = static_cast<double>(ep_ - ranks_per_machine_) / ep_;
  const double sent = tokens_per_rank * hit_sum;
  const double received = total_tokens * hit_max;  // busiest receiver
  out.nvlink_rows = std::max(sent, received) * local_share;
  out.infiniband_rows = std::max(sent, received) * remote_share;
  return out;
}

}  // namespace epserve::planner
