// The acceptance check of GRACE-MoE placement on the real DeepSeek-V2-Lite routing traces:
// profile on the first half of the prompts, evaluate on the second, for 2 x 4, 4 x 4 and 2 x 8
// ranks, with eplb given as many extra copies as grace makes, layer by layer. Exits non-zero
// unless, on every topology, grace (the placement `place` writes, default options) sends at
// least 35% fewer (token, machine) copies across machines than the best eplb row and fewer than
// contiguous, has a lower modeled layer time than all of them and keeps max/mean rank load
// <= 1.2 (issue 17; docs/placement-results.md).
// Usage: placement_real_trace_check <folder of prompt_*.csv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "placement/compare.h"
#include "placement/report.h"
#include "placement/trace_io.h"

using namespace epserve::placement;

namespace {

const CompareRow* Find(const std::vector<CompareRow>& rows, const std::string& label) {
  for (const CompareRow& r : rows) {
    if (r.label == label) return &r;
  }
  return nullptr;
}

bool Check(const std::vector<CompareRow>& rows, const std::string& topo) {
  const CompareRow* grace = Find(rows, "grace");
  bool ok = grace != nullptr;
  if (grace == nullptr) return false;
  int64_t best_eplb = -1;
  for (const CompareRow& r : rows) {
    if (r.label.rfind("eplb", 0) != 0) continue;
    const int64_t c = r.evaluation.total.traffic.machine_cross;
    if (best_eplb < 0 || c < best_eplb) best_eplb = c;
  }
  const LayerEvaluation& gt = grace->evaluation.total;
  const bool balanced = gt.load.max_over_mean() <= 1.2;
  const double fewer = 1.0 - static_cast<double>(gt.traffic.machine_cross) / best_eplb;
  std::printf(
      "%s: grace sends %.1f%% fewer cross-machine copies than the best eplb row (%s, goal 35%%); "
      "rank max/mean %.3f (%s, bound 1.2)\n",
      topo.c_str(), 100.0 * fewer, fewer >= 0.35 ? "ok" : "FAIL", gt.load.max_over_mean(),
      balanced ? "ok" : "FAIL");
  ok = ok && balanced && fewer >= 0.35;
  for (const char* rival : {"contiguous", "eplb+hierarchical", "eplb+global", "eplb+global+topo"}) {
    const CompareRow* other = Find(rows, rival);
    if (grace == nullptr || other == nullptr) return false;
    const LayerEvaluation& g = grace->evaluation.total;
    const LayerEvaluation& o = other->evaluation.total;
    const bool less_traffic = g.traffic.machine_cross < o.traffic.machine_cross;
    const bool faster = g.time_us < o.time_us;
    std::printf(
        "%s: grace vs %-18s cross-machine copies %lld vs %lld (%s), time %.1f vs %.1f us "
        "(%s)\n",
        topo.c_str(), rival, static_cast<long long>(g.traffic.machine_cross),
        static_cast<long long>(o.traffic.machine_cross), less_traffic ? "ok" : "FAIL", g.time_us,
        o.time_us, faster ? "ok" : "FAIL");
    ok = ok && less_traffic && faster;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <folder of prompt_*.csv>\n", argv[0]);
    return 2;
  }
  epserve::StatusOr<Trace> trace = ImportCsvTrace({argv[1]}, TraceImportOptions{});
  if (!trace.ok()) {
    std::fprintf(stderr, "error: %s\n", trace.status().message().c_str());
    return 1;
  }
  epserve::StatusOr<TraceSplit> split = SplitTrace(*trace, 0.5);
  if (!split.ok()) {
    std::fprintf(stderr, "error: %s\n", split.status().message().c_str());
    return 1;
  }
  std::printf("trace: %lld tokens, %zu prompts; profile %lld tokens, holdout %lld tokens\n",
              static_cast<long long>(trace->num_tokens()), trace->SequenceOrder().size(),
              static_cast<long long>(split->profile.num_tokens()),
              static_cast<long long>(split->holdout.num_tokens()));
  bool ok = true;
  for (const Topology topo : {Topology{2, 4}, Topology{4, 4}, Topology{2, 8}}) {
    CompareOptions options;
    options.topology = topo;
    options.variants = AllVariants();
    options.num_threads = 2;  // the result does not depend on it
    epserve::StatusOr<std::vector<CompareRow>> rows =
        Compare(split->profile, split->holdout, options);
    if (!rows.ok()) {
      std::fprintf(stderr, "error: %s\n", rows.status().message().c_str());
      return 1;
    }
    const std::string name =
        std::to_string(topo.num_nodes) + "x" + std::to_string(topo.ranks_per_node);
    std::printf("\n%s\n%s", name.c_str(), FormatCompareTable(*rows).c_str());
    ok = Check(*rows, name) && ok;
  }
  std::printf("\n%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
