#include "placement/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace epserve::placement {
namespace {

using Json = nlohmann::json;

std::string Format(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

Json LayerJson(const LayerEvaluation& l) {
  const TrafficCounts& t = l.traffic;
  return Json{{"extra_copies", l.extra_copies},
              {"local", t.rank_local},
              {"intra_machine", t.rank_intra},
              {"cross_machine", t.rank_cross},
              {"machine_local", t.machine_local},
              {"machine_cross", t.machine_cross},
              {"cross_machine_bytes", t.cross_bytes},
              {"nvlink_bytes", t.nvlink_bytes},
              {"max_load", l.load.max},
              {"mean_load", l.load.mean},
              {"max_over_mean", l.load.max_over_mean()},
              {"load_stddev", l.load.stddev},
              {"idle_fraction", l.load.idle_fraction},
              {"step_max_over_mean", l.step_max_over_mean},
              {"modeled_layer_time_us", l.time_us},
              {"compute_us", l.compute_us},
              {"ib_us", l.ib_us},
              {"nvlink_us", l.nvlink_us}};
}

}  // namespace

std::string FormatCompareTable(const std::vector<CompareRow>& rows) {
  std::string out =
      Format("%-20s %6s %10s %10s %10s %10s %8s %9s %9s %9s\n", "strategy", "extra", "local",
             "intra", "cross", "cross-mach", "cross-GB", "max/mean", "step-max", "time-us");
  for (const CompareRow& row : rows) {
    const LayerEvaluation& t = row.evaluation.total;
    out += Format("%-20s %6d %10lld %10lld %10lld %10lld %8.3f %9.3f %9.3f %9.1f\n",
                  row.label.c_str(), t.extra_copies, static_cast<long long>(t.traffic.rank_local),
                  static_cast<long long>(t.traffic.rank_intra),
                  static_cast<long long>(t.traffic.rank_cross),
                  static_cast<long long>(t.traffic.machine_cross), t.traffic.cross_bytes / 1e9,
                  t.load.max_over_mean(), t.step_max_over_mean, t.time_us);
  }
  return out;
}

std::string FormatLayerTable(const Evaluation& evaluation) {
  std::string out = Format("%-6s %6s %10s %10s %10s %10s %9s %8s %6s %9s %9s %9s %9s\n", "layer",
                           "extra", "local", "intra", "cross", "cross-mach", "max/mean", "stddev",
                           "idle", "comp-us", "ib-us", "nvl-us", "time-us");
  auto line = [&](const std::string& name, const LayerEvaluation& l) {
    out += Format(
        "%-6s %6d %10lld %10lld %10lld %10lld %9.3f %8.1f %6.3f %9.1f %9.1f %9.1f %9.1f\n",
        name.c_str(), l.extra_copies, static_cast<long long>(l.traffic.rank_local),
        static_cast<long long>(l.traffic.rank_intra), static_cast<long long>(l.traffic.rank_cross),
        static_cast<long long>(l.traffic.machine_cross), l.load.max_over_mean(), l.load.stddev,
        l.load.idle_fraction, l.compute_us, l.ib_us, l.nvlink_us, l.time_us);
  };
  for (const LayerEvaluation& l : evaluation.layers) line(std::to_string(l.layer_id), l);
  line("total", evaluation.total);
  return out;
}

std::string CompareJson(const std::vector<CompareRow>& rows, const Topology& topology,
                        const CostModel& cost, int step_tokens_per_rank) {
  Json strategies = Json::object();
  for (const CompareRow& row : rows) {
    Json s = LayerJson(row.evaluation.total);
    s["strategy"] = row.placement.strategy;
    s["routing"] = std::string(RoutingPolicyName(row.placement.routing));
    strategies[row.label] = std::move(s);
  }
  Json doc = {{"topology",
               {{"num_nodes", topology.num_nodes}, {"ranks_per_node", topology.ranks_per_node}}},
              {"cost_model",
               {{"expert_tflops", cost.expert_tflops},
                {"hbm_gbytes_per_s", cost.hbm_gbytes_per_s},
                {"ib_gbytes_per_s", cost.ib_gbytes_per_s},
                {"nvlink_gbytes_per_s", cost.nvlink_gbytes_per_s},
                {"activation_bytes", cost.activation_bytes},
                {"weight_bytes", cost.weight_bytes}}},
              {"step_tokens_per_rank", step_tokens_per_rank},
              {"num_tokens", rows.empty() ? 0 : rows[0].evaluation.num_tokens},
              {"strategies", strategies}};
  return doc.dump(2) + "\n";
}

std::string EvaluationJson(const Evaluation& evaluation, const std::string& label) {
  Json layers = Json::array();
  for (const LayerEvaluation& l : evaluation.layers) {
    Json j = LayerJson(l);
    j["layer"] = l.layer_id;
    layers.push_back(std::move(j));
  }
  Json total = LayerJson(evaluation.total);
  Json doc = {{"num_tokens", evaluation.num_tokens},
              {"num_steps", evaluation.num_steps},
              {"strategies", {{label, total}}},
              {"layers", layers}};
  return doc.dump(2) + "\n";
}

std::string FormatGraceReport(const GraceLayerReport& report) {
  std::string out = Format("layer %d: machines", report.layer_id);
  for (int size : report.machine_sizes) out += Format(" %d", size);
  if (report.cross_before_copies > 0) {
    // Min-cut grouping.
    out += Format(
        " experts; (token, machine) connectivity %.0f -> %.0f by local search; %d copies: "
        "expected copies sent across machines %.0f -> %.0f\n",
        report.node_connectivity_before, report.node_connectivity_after, report.traffic_copies,
        report.cross_before_copies, report.cross_after_copies);
  } else {
    out += Format(" experts, machine-level U %.3f\n", report.machine_affinity_share);
  }
  if (!report.machine_curve.curve.empty()) {
    out += "  machines: r, delta, U(r), S(r)\n";
    for (size_t i = 0; i < report.machine_curve.curve.size(); ++i) {
      const CurvePoint& p = report.machine_curve.curve[i];
      out += Format("    %5.2f %3d %6.3f %6.3f%s\n", p.r, p.delta, p.u, p.s,
                    static_cast<int>(i) == report.machine_curve.knee ? "  <- knee" : "");
    }
  }
  for (const GraceMachineCurve& c : report.curves) {
    out += Format("  machine %d (%d experts): r, delta, U(r), S(r)\n", c.node, c.num_experts);
    for (size_t i = 0; i < c.curve.size(); ++i) {
      const CurvePoint& p = c.curve[i];
      out += Format("    %5.2f %3d %6.3f %6.3f%s\n", p.r, p.delta, p.u, p.s,
                    static_cast<int>(i) == c.knee ? "  <- knee" : "");
    }
  }
  const MachineReplicationPlan& mrep = report.machine_replication;
  if (mrep.heaviest_node >= 0) {
    out += Format(
        "  machine replication: rho %.2f, %d replicas of %zu hot experts of machine %d onto "
        "machines",
        mrep.rho, mrep.num_replicas, mrep.hot_experts.size(), mrep.heaviest_node);
    for (int m : mrep.target_nodes) out += Format(" %d", m);
    out += "\n";
  }
  const ReplicationPlan& rep = report.replication;
  if (rep.heaviest_rank >= 0) {
    out += Format("  replication: rho %.2f, %d replicas of %zu hot experts of rank %d onto ranks",
                  rep.rho, rep.num_replicas, rep.hot_experts.size(), rep.heaviest_rank);
    for (int r : rep.target_ranks) out += Format(" %d", r);
    out += "\n";
  }
  const RebalanceReport& reb = report.rebalance;
  if (reb.max_over_mean_before > 0) {
    out += Format(
        "  rank rebalancing: %d moves, %d swaps; predicted max/mean rank load %.3f -> %.3f\n",
        reb.moves, reb.swaps, reb.max_over_mean_before, reb.max_over_mean_after);
  }
  return out;
}

}  // namespace epserve::placement
