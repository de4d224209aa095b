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

double UniformSlotsHitProbability(const ModelSpec& model, const std::vector<ExpertSlot>& slots) {
  const int n = model.n_routed_experts;
  const int k = model.num_experts_per_tok;
  const int groups = model.n_group;
  const int kept = model.topk_group;
  const int group_size = n / groups;
  const int pool = kept * group_size;
  // A rank holding two copies of one expert serves it with their summed share.
  std::map<int, double> share;
  for (const ExpertSlot& s : slots) share[s.expert] = std::min(1.0, share[s.expert] + s.share);
  std::map<int, std::vector<double>> by_group;
  for (const auto& [e, s] : share) by_group[e / group_size].push_back(s);
  const int touched = static_cast<int>(by_group.size());
  if (touched > 16) {
    double miss = 1;
    for (const auto& [e, s] : share) miss *= 1.0 - s * k / n;
    return 1.0 - miss;
  }
  std::vector<std::vector<double>> shares;
  for (auto& [g, list] : by_group) shares.push_back(std::move(list));
  const double subsets = Choose(groups, kept);
  double miss = 0;
  for (unsigned mask = 0; mask < (1u << touched); ++mask) {
    const int j = __builtin_popcount(mask);
    if (j > kept) continue;
    std::vector<double> local;
    for (int g = 0; g < touched; ++g) {
      if (mask & (1u << g)) local.insert(local.end(), shares[g].begin(), shares[g].end());
    }
    const double p_mask = Choose(groups - touched, kept - j) / subsets;
    if (std::all_of(local.begin(), local.end(), [](double s) { return s == 1.0; })) {
      miss += p_mask * ChooseRatio(pool - static_cast<int>(local.size()), pool, k);
      continue;
    }
    // E[prod over selected local experts of (1 - share)] for a uniform k-subset of the pool:
    // sum_i (-1)^i e_i(shares) P(i given experts all selected), e_i elementary symmetric sums.
    const int top = std::min<int>(static_cast<int>(local.size()), k);
    std::vector<double> e(top + 1, 0);
    e[0] = 1;
    for (double s : local) {
      for (int i = top; i >= 1; --i) e[i] += e[i - 1] * s;
    }
    double expect = 0;
    double p_all = 1;  // C(pool - i, k - i) / C(pool, k)
    for (int i = 0; i <= top; ++i) {
      expect += (i % 2 == 0 ? 1 : -1) * e[i] * p_all;
      p_all *= static_cast<double>(k - i) / (pool - i);
    }
    miss += p_mask * expect;
  }
  return 1.0 - miss;
}

StatusOr<RoutingModel> RoutingModel::Uniform(const ModelSpec& model, int ep,
                                             int ranks_per_machine) {
  return Create(model, {.ep = ep, .ranks_per_machine = ranks_per_machine});
}

StatusOr<RoutingModel> RoutingModel::FromTrace(const RoutingTrace& trace, const ModelSpec& model,
                                               int ep, int ranks_per_machine) {
  return Create(model, {.ep = ep, .ranks_per_machine = ranks_per_machine, .trace = &trace});
}

namespace {

// Placed layer with `layer_id`, or null.
const ExpertLayout* FindPlaced(const ExpertPlacement& placement, int layer_id) {
  for (const ExpertLayout& l : placement.layers) {
    if (l.layer_id == layer_id) return &l;
  }
  return nullptr;
}

std::string PlacedLayerIds(const ExpertPlacement& placement) {
  std::string ids;
  for (const ExpertLayout& l : placement.layers) {
    if (!ids.empty()) ids += ",";
    ids += std::to_string(l.layer_id);
  }
  return ids;
}

Status CheckPlacement(const ExpertPlacement& placement, const ModelSpec& model,
                      const RoutingOptions& o) {
  const std::string& what = placement.source;
  if (placement.layers.empty()) return Status::InvalidArgument(what + ": no placed layers");
  if (placement.num_experts != model.n_routed_experts) {
    return Status::InvalidArgument(what + ": places " + std::to_string(placement.num_experts) +
                                   " experts but " + model.name + " has " +
                                   std::to_string(model.n_routed_experts));
  }
  if (placement.num_ranks != o.ep) {
    return Status::InvalidArgument(what + ": places experts on " +
                                   std::to_string(placement.num_ranks) + " ranks but EP is " +
                                   std::to_string(o.ep));
  }
  if (placement.ranks_per_machine > 0 && placement.ranks_per_machine != o.ranks_per_machine) {
    return Status::InvalidArgument(
        what + ": places " + std::to_string(placement.ranks_per_machine) +
        " ranks per machine but the deployment has " + std::to_string(o.ranks_per_machine) +
        " (its copies' shares depend on which ranks share a machine; use --gpus-per-machine " +
        std::to_string(placement.ranks_per_machine) + ")");
  }
  const int slots = (model.n_routed_experts + o.redundant_experts) / o.ep;
  for (const ExpertLayout& l : placement.layers) {
    RETURN_IF_ERROR(
        l.Validate(model.n_routed_experts, what + " layer " + std::to_string(l.layer_id)));
    if (l.num_ranks() != o.ep) {
      return Status::InvalidArgument(what + " layer " + std::to_string(l.layer_id) + ": " +
                                     std::to_string(l.num_ranks()) + " ranks, EP is " +
                                     std::to_string(o.ep));
    }
    if (l.MaxSlots() > slots) {
      return Status::InvalidArgument(
          what + " layer " + std::to_string(l.layer_id) + ": a rank holds " +
          std::to_string(l.MaxSlots()) + " expert slots but EP " + std::to_string(o.ep) +
          " with --redundant-experts " + std::to_string(o.redundant_experts) + " gives " +
          std::to_string(slots) + " per rank (use --redundant-experts " +
          std::to_string(l.MaxSlots() * o.ep - model.n_routed_experts) + " or more)");
    }
  }
  return Status::Ok();
}

// Per-rank hit rates of one traced layer under `layout`: a token misses rank r when none of its
// experts' copies there serve it.
std::vector<double> TraceRankHits(const std::vector<uint16_t>& sel, int top_k,
                                  const ExpertLayout& layout, int num_experts) {
  struct Copy {
    int rank;
    double share;
  };
  std::vector<std::vector<Copy>> copies(num_experts);
  for (int r = 0; r < layout.num_ranks(); ++r) {
    for (const ExpertSlot& s : layout.ranks[r]) {
      std::vector<Copy>& list = copies[s.expert];
      auto it = std::find_if(list.begin(), list.end(), [r](const Copy& c) { return c.rank == r; });
      if (it == list.end()) {
        list.push_back({r, s.share});
      } else {
        it->share = std::min(1.0, it->share + s.share);
      }
    }
  }
  std::vector<double> hits(layout.num_ranks(), 0);
  std::vector<double> miss(layout.num_ranks(), 1);
  std::vector<int> touched;
  for (size_t t = 0; t < sel.size(); t += top_k) {
    touched.clear();
    for (int j = 0; j < top_k; ++j) {
      for (const Copy& c : copies[sel[t + j]]) {
        if (miss[c.rank] == 1) touched.push_back(c.rank);
        miss[c.rank] *= 1.0 - c.share;
      }
    }
    for (int r : touched) {
      hits[r] += 1.0 - miss[r];
      miss[r] = 1;
    }
  }
  const double tokens = static_cast<double>(sel.size()) / top_k;
  for (double& h : hits) h /= tokens;
  return hits;
}

}  // namespace

StatusOr<RoutingModel> RoutingModel::Create(const ModelSpec& model, const RoutingOptions& o) {
  const int experts = model.n_routed_experts;
  if (o.ep <= 0 || o.ranks_per_machine <= 0) {
    return Status::InvalidArgument("EP and ranks per machine must be positive");
  }
  if (o.placement == nullptr && o.redundant_experts == 0 && experts % o.ep != 0) {
    return Status::InvalidArgument("EP " + std::to_string(o.ep) + " does not divide the " +
                                   std::to_string(experts) + " routed experts");
  }
  if (o.redundant_experts < 0 || (experts + o.redundant_experts) % o.ep != 0) {
    return Status::InvalidArgument(
        "EP " + std::to_string(o.ep) + " with " + std::to_string(o.redundant_experts) +
        " redundant experts: " + std::to_string(experts + o.redundant_experts) +
        " slots do not split evenly over the ranks");
  }
  const RoutingTrace* trace = o.trace;
  if (trace != nullptr &&
      (trace->top_k != model.num_experts_per_tok || trace->num_experts > experts)) {
    return Status::InvalidArgument("routing trace has " + std::to_string(trace->num_experts) +
                                   " experts, top-" + std::to_string(trace->top_k) +
                                   ", but model " + model.name + " has " + std::to_string(experts) +
                                   " experts, top-" + std::to_string(model.num_experts_per_tok));
  }
  if (o.placement != nullptr) RETURN_IF_ERROR(CheckPlacement(*o.placement, model, o));
  RoutingModel routing;
  routing.ep_ = o.ep;
  routing.ranks_per_machine_ = o.ranks_per_machine;
  routing.redundant_experts_ = o.redundant_experts;
  routing.uniform_ = trace == nullptr;
  routing.ranks_alike_ = trace == nullptr && o.placement == nullptr && o.redundant_experts == 0;
  if (o.placement != nullptr) {
    routing.layout_source_ = "placement " + o.placement->source;
  } else if (o.redundant_experts > 0) {
    routing.layout_source_ = "balanced (EPLB-like)";
  }
  const std::vector<double> uniform_prob(experts,
                                         static_cast<double>(model.num_experts_per_tok) / experts);
  // The layout of one layer given its expert loads.
  auto layout_for = [&](const std::vector<double>& prob, int layer_id) -> StatusOr<ExpertLayout> {
    if (o.placement != nullptr) {
      const ExpertLayout* placed = FindPlaced(*o.placement, layer_id);
      if (placed == nullptr) {
        return Status::InvalidArgument("layer " + std::to_string(layer_id) +
                                       " of the routing trace is not in " + o.placement->source +
                                       " (it places layers " + PlacedLayerIds(*o.placement) + ")");
      }
      return *placed;
    }
    if (o.redundant_experts == 0) return ContiguousLayout(experts, o.ep);
    return BalancedLayout(prob, o.ep, o.redundant_experts);
  };
  if (trace == nullptr) {
    const size_t count = o.placement != nullptr ? o.placement->layers.size() : 1;
    for (size_t l = 0; l < count; ++l) {
      LayerStats stats;
      stats.expert_prob = uniform_prob;
      const int id = o.placement != nullptr ? o.placement->layers[l].layer_id : -1;
      ASSIGN_OR_RETURN(stats.layout, layout_for(uniform_prob, id));
      stats.rank_hit.resize(o.ep);
      for (int r = 0; r < o.ep; ++r) {
        stats.rank_hit[r] = routing.ranks_alike_
                                ? UniformRankHitProbability(model, experts / o.ep, r)
                                : UniformSlotsHitProbability(model, stats.layout.ranks[r]);
      }
      routing.layers_.push_back(std::move(stats));
    }
    return routing;
  }
  for (size_t l = 0; l < trace->selections.size(); ++l) {
    const std::vector<uint16_t>& sel = trace->selections[l];
    const double tokens = static_cast<double>(trace->NumTokens(l));
    LayerStats stats;
    stats.expert_prob.assign(experts, 0);
    for (uint16_t e : sel) stats.expert_prob[e] += 1;
    for (double& p : stats.expert_prob) p /= tokens;
    ASSIGN_OR_RETURN(stats.layout, layout_for(stats.expert_prob, trace->layer_ids[l]));
    stats.rank_hit = TraceRankHits(sel, trace->top_k, stats.layout, experts);
    routing.layers_.push_back(std::move(stats));
  }
  return routing;
}

int RoutingModel::MaxSlotsPerRank() const {
  int most = 0;
  for (const LayerStats& l : layers_) most = std::max(most, l.layout.MaxSlots());
  return most;
}

LayerRouting RoutingModel::Evaluate(int layer_idx, double total_tokens,
                                    double tokens_per_rank) const {
  CHECK(layer_idx >= 0 && layer_idx < num_layers()) << "routing layer " << layer_idx;
  const LayerStats& stats = layers_[layer_idx];
  LayerRouting out;
  const int num_ranks = ranks_alike_ ? 1 : ep_;
  double rows = 0;
  for (int r = 0; r < num_ranks; ++r) {
    RankRouting rank;
    for (const ExpertSlot& slot : stats.layout.ranks[r]) {
      // A token selecting the expert goes to this copy with probability `share`.
      const double p = stats.expert_prob[slot.expert] * slot.share;
      rank.touched_experts += 1.0 - std::pow(1.0 - p, total_tokens);
      rank.rows += total_tokens * p;
    }
    rows += rank.rows;
    out.ranks.push_back(rank);
  }
  out.mean_rows = rows / num_ranks;
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
