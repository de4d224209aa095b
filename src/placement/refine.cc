#include "placement/refine.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace epserve::placement {

namespace {

class Refiner {
 public:
  Refiner(const TokenSets& sets, const RefineOptions& options, std::vector<int>* part)
      : sets_(sets), opt_(options), part_(*part), p_(options.num_parts) {
    cnt_.assign(static_cast<size_t>(sets.num_sets()) * p_, 0);
    weight_.assign(p_, 0.0);
    size_.assign(p_, 0);
    for (int e = 0; e < sets.num_experts(); ++e) {
      const int a = part_[e];
      if (a < 0) continue;
      weight_[a] += opt_.weight[e];
      ++size_[a];
      for (int s : sets.SetsOf(e)) ++cnt_[Index(s, a)];
    }
    gain_.assign(static_cast<size_t>(sets.num_experts()) * p_, 0.0);
    stamp_.assign(sets.num_sets(), -1);
  }

  RefineResult Run() {
    RefineResult result;
    result.before = Connectivity(sets_, part_, p_);
    ComputeGains();
    for (int pass = 0; pass < opt_.max_passes; ++pass) {
      const int moves = FmPass();
      if (moves > 0) {
        result.moves += moves;
        continue;
      }
      if (TrySwap()) {
        ++result.swaps;
        continue;
      }
      break;
    }
    result.after = Connectivity(sets_, part_, p_);
    return result;
  }

 private:
  size_t Index(int s, int p) const { return static_cast<size_t>(s) * p_ + p; }
  double& Gain(int e, int b) { return gain_[static_cast<size_t>(e) * p_ + b]; }

  // Adds sign * (what set s contributes to the gains of its expert f, in part pf).
  void AddContribution(int s, int f, int pf, double sign) {
    const double c = sign * sets_.count(s);
    const int* row = cnt_.data() + Index(s, 0);
    const double loss = row[pf] == 1 ? c : 0;
    double* g = gain_.data() + static_cast<size_t>(f) * p_;
    for (int b = 0; b < p_; ++b) {
      if (b != pf) g[b] += loss - (row[b] == 0 ? c : 0);
    }
  }

  // gain(e -> b) = count of e's sets that stop spanning e's part - count that start spanning b.
  void ComputeGains() {
    std::fill(gain_.begin(), gain_.end(), 0.0);
    for (int e = 0; e < sets_.num_experts(); ++e) {
      if (part_[e] < 0) continue;
      for (int s : sets_.SetsOf(e)) AddContribution(s, e, part_[e], 1);
    }
  }

  // One Fiduccia-Mattheyses pass: the best feasible move of an unlocked expert, even when it
  // loses, then lock it; stop after a run of moves without a new best and roll back to the
  // best prefix. Returns the moves kept.
  int FmPass() {
    constexpr double kEps = 1e-9;
    std::vector<char> locked(sets_.num_experts(), 0);
    std::vector<std::pair<int, int>> history;  // (expert, part it left)
    double cum = 0, best = 0;
    size_t best_len = 0;
    const size_t patience = std::max<size_t>(8, sets_.num_experts() / 4);
    while (true) {
      int best_e = -1, best_b = -1;
      double best_g = -1e300;
      for (int e = 0; e < sets_.num_experts(); ++e) {
        const int a = part_[e];
        if (a < 0 || locked[e] || size_[a] - 1 < opt_.min_part_size) continue;
        for (int b = 0; b < p_; ++b) {
          if (b == a || size_[b] + 1 > opt_.max_part_size) continue;
          const double g = Gain(e, b);
          if (g <= best_g) continue;
          if (!WeightOk(a, b, weight_[a] - opt_.weight[e], weight_[b] + opt_.weight[e])) continue;
          best_g = g;
          best_e = e;
          best_b = b;
        }
      }
      if (best_e < 0) break;
      history.emplace_back(best_e, part_[best_e]);
      Apply(best_e, best_b);
      locked[best_e] = 1;
      cum += best_g;
      if (cum > best + kEps) {
        best = cum;
        best_len = history.size();
      } else if (history.size() - best_len >= patience) {
        break;
      }
    }
    while (history.size() > best_len) {
      Apply(history.back().first, history.back().second);
      history.pop_back();
    }
    return static_cast<int>(best_len);
  }

  bool WeightOk(int a, int b, double wa, double wb) const {
    // New weights wa (part a) and wb (part b).
    const double cap = opt_.max_part_weight;
    if (wa <= cap && wb <= cap) return true;
    return std::max(wa, wb) < std::max(weight_[a], weight_[b]);
  }

  // Moves e to part b, keeping counts and gains current. A set's contribution to another
  // member f changes only when a count crosses the thresholds the gains test: part a emptied
  // (moving f to a now costs), part b newly spanned (moving f to b no longer costs), a down to
  // one member (f in a now frees it by leaving), b up from one (f in b no longer does).
  void Apply(int e, int b) {
    const int a = part_[e];
    for (int s : sets_.SetsOf(e)) {
      AddContribution(s, e, a, -1);
      int* row = cnt_.data() + Index(s, 0);
      const int old_a = row[a]--, old_b = row[b]++;
      const double c = sets_.count(s);
      const uint16_t* members = sets_.Set(s);
      for (int i = 0; i < sets_.k(); ++i) {
        const int f = members[i];
        const int pf = part_[f];
        if (f == e || pf < 0) continue;
        double* g = gain_.data() + static_cast<size_t>(f) * p_;
        if (old_a == 1 && pf != a) g[a] -= c;
        if (old_b == 0 && pf != b) g[b] += c;
        if (pf == a && old_a == 2) {
          for (int x = 0; x < p_; ++x) g[x] += x != a ? c : 0;
        }
        if (pf == b && old_b == 1) {
          for (int x = 0; x < p_; ++x) g[x] -= x != b ? c : 0;
        }
      }
      AddContribution(s, e, b, 1);
    }
    part_[e] = b;
    weight_[a] -= opt_.weight[e];
    weight_[b] += opt_.weight[e];
    --size_[a];
    ++size_[b];
    if (opt_.check_gains) CheckGains();
  }

  void CheckGains() {
    const std::vector<double> kept = gain_;
    ComputeGains();
    for (size_t i = 0; i < kept.size(); ++i) CHECK(std::abs(kept[i] - gain_[i]) < 1e-6);
  }

  // The best experts of part a by gain towards b.
  std::vector<int> Candidates(int a, int b) {
    std::vector<int> list;
    for (int e = 0; e < sets_.num_experts(); ++e) {
      if (part_[e] == a) list.push_back(e);
    }
    const size_t keep = std::min<size_t>(list.size(), opt_.swap_candidates);
    std::partial_sort(list.begin(), list.begin() + keep, list.end(),
                      [&](int x, int y) { return Gain(x, b) > Gain(y, b); });
    list.resize(keep);
    return list;
  }

  bool TrySwap() {
    constexpr double kEps = 1e-9;
    double best = kEps;
    int best_e = -1, best_f = -1;
    for (int a = 0; a < p_; ++a) {
      for (int b = a + 1; b < p_; ++b) {
        const std::vector<int> from_a = Candidates(a, b);
        const std::vector<int> from_b = Candidates(b, a);
        for (int e : from_a) {
          for (int s : sets_.SetsOf(e)) stamp_[s] = e;
          for (int f : from_b) {
            double g = Gain(e, b) + Gain(f, a);
            if (g <= best) continue;  // the correction below only lowers it
            // Sets holding both keep both parts: undo what the two single gains counted.
            for (int s : sets_.SetsOf(f)) {
              if (stamp_[s] != e) continue;
              const int* row = cnt_.data() + Index(s, 0);
              g -= sets_.count(s) * ((row[a] == 1) + (row[b] == 1));
            }
            if (g <= best) continue;
            const double we = opt_.weight[e], wf = opt_.weight[f];
            if (!WeightOk(a, b, weight_[a] - we + wf, weight_[b] - wf + we)) continue;
            best = g;
            best_e = e;
            best_f = f;
          }
        }
        std::fill(stamp_.begin(), stamp_.end(), -1);
      }
    }
    if (best_e < 0) return false;
    const int a = part_[best_e], b = part_[best_f];
    Apply(best_e, b);
    Apply(best_f, a);
    return true;
  }

  const TokenSets& sets_;
  const RefineOptions& opt_;
  std::vector<int>& part_;
  const int p_;
  std::vector<int> cnt_;  // [set][part] experts of the set in the part
  std::vector<double> weight_;
  std::vector<int> size_;
  std::vector<double> gain_;  // [expert][part]
  std::vector<int> stamp_;
};

}  // namespace

double Connectivity(const TokenSets& sets, const std::vector<int>& part, int num_parts) {
  double total = 0;
  std::vector<char> seen(num_parts);
  for (int s = 0; s < sets.num_sets(); ++s) {
    std::fill(seen.begin(), seen.end(), 0);
    int distinct = 0;
    for (int i = 0; i < sets.k(); ++i) {
      const int p = part[sets.Set(s)[i]];
      if (p >= 0 && !seen[p]) {
        seen[p] = 1;
        ++distinct;
      }
    }
    total += sets.count(s) * distinct;
  }
  return total;
}

RefineResult RefineConnectivity(const TokenSets& sets, const RefineOptions& options,
                                std::vector<int>* part) {
  CHECK(part->size() == static_cast<size_t>(sets.num_experts()));
  CHECK(options.weight.size() == part->size());
  CHECK(options.num_parts >= 1);
  return Refiner(sets, options, part).Run();
}

}  // namespace epserve::placement
