#include "placement/mincut.h"

#include <metis.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>

namespace epserve::placement {

namespace {

// Cut of a labelling, each pair once.
double CutOf(const std::vector<double>& affinity, int n, const std::vector<int>& part) {
  double cut = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (part[i] != part[j]) cut += affinity[static_cast<size_t>(i) * n + j];
    }
  }
  return cut;
}

// METIS takes integer weights: scale each constraint so its largest vertex weighs ~10^4 (and
// every vertex at least 1, since an empty weight lets METIS pile vertices into one part), and
// edges so the heaviest is ~10^5 (sums stay far inside 32 bits).
std::vector<idx_t> ScaledWeights(const std::vector<double>& w, double top) {
  const double max = *std::max_element(w.begin(), w.end());
  std::vector<idx_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    out[i] = max > 0 ? std::max<idx_t>(1, static_cast<idx_t>(std::llround(w[i] / max * top))) : 1;
  }
  return out;
}

}  // namespace

StatusOr<MinCutResult> MinCutPartition(const std::vector<double>& affinity, int n,
                                       const MinCutOptions& options) {
  const int parts = options.num_parts;
  const size_t ncon = options.constraints.size();
  if (n < 1 || affinity.size() != static_cast<size_t>(n) * n || parts < 1 || parts > n ||
      ncon < 1 || options.imbalance.size() != ncon || options.num_tries < 1) {
    return Status::InvalidArgument("min-cut partition of " + std::to_string(n) + " vertices into " +
                                   std::to_string(parts) + " parts: inconsistent sizes");
  }
  for (const auto& c : options.constraints) {
    if (c.size() != static_cast<size_t>(n)) {
      return Status::InvalidArgument("min-cut partition: a constraint has the wrong size");
    }
  }
  MinCutResult result;
  result.part.assign(n, 0);
  if (parts == 1) return result;

  // CSR adjacency of the non-zero affinities.
  double max_edge = 0;
  for (double a : affinity) max_edge = std::max(max_edge, a);
  std::vector<idx_t> xadj{0}, adjncy, adjwgt;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double a = affinity[static_cast<size_t>(i) * n + j];
      if (i == j || !(a > 0)) continue;
      adjncy.push_back(j);
      adjwgt.push_back(std::max<idx_t>(1, static_cast<idx_t>(std::llround(a / max_edge * 1e5))));
    }
    xadj.push_back(static_cast<idx_t>(adjncy.size()));
  }
  std::vector<idx_t> vwgt(n * ncon);
  for (size_t c = 0; c < ncon; ++c) {
    const std::vector<idx_t> w = ScaledWeights(options.constraints[c], 1e4);
    for (int v = 0; v < n; ++v) vwgt[v * ncon + c] = w[v];
  }
  std::vector<real_t> ubvec(options.imbalance.begin(), options.imbalance.end());

  idx_t nvtxs = n, ncon_i = static_cast<idx_t>(ncon), nparts = parts;
  std::vector<idx_t> part(n);
  double best = std::numeric_limits<double>::infinity();
  for (int t = 0; t < options.num_tries; ++t) {
    idx_t opts[METIS_NOPTIONS];
    METIS_SetDefaultOptions(opts);
    opts[METIS_OPTION_SEED] = static_cast<idx_t>((options.seed * 7919 + t) & 0x7fffffff);
    opts[METIS_OPTION_NUMBERING] = 0;
    opts[METIS_OPTION_UFACTOR] = 1;
    idx_t objval = 0;
    // METIS 5.1 draws from one process-wide random state that each call reseeds; two calls at
    // once (layers placed in parallel) interleave their draws, and the partition would depend on
    // the thread count and timing. One call at a time keeps it a function of its input.
    static std::mutex metis_mutex;
    std::lock_guard<std::mutex> metis_lock(metis_mutex);
    const int rc = METIS_PartGraphKway(&nvtxs, &ncon_i, xadj.data(), adjncy.data(), vwgt.data(),
                                       nullptr, adjwgt.empty() ? nullptr : adjwgt.data(), &nparts,
                                       nullptr, ubvec.data(), opts, &objval, part.data());
    if (rc != METIS_OK) {
      return Status::Internal("METIS failed (" + std::to_string(rc) + ") partitioning " +
                              std::to_string(n) + " experts into " + std::to_string(parts));
    }
    std::vector<int> labels(part.begin(), part.end());
    // Every part must hold something; METIS may leave one empty on tiny graphs.
    std::vector<int> size(parts, 0);
    for (int p : labels) ++size[p];
    if (std::count(size.begin(), size.end(), 0) > 0) continue;
    const double cut = CutOf(affinity, n, labels);
    if (cut < best) {
      best = cut;
      result.part = std::move(labels);
      result.cut = cut;
    }
  }
  if (!std::isfinite(best)) {
    // Fall back to a round-robin split so every part holds a vertex; refinement follows.
    for (int v = 0; v < n; ++v) result.part[v] = v % parts;
    result.cut = CutOf(affinity, n, result.part);
  }
  return result;
}

}  // namespace epserve::placement
