// `epserve place` (expert placement from a routing trace) and `epserve place evaluate`
// (replay a trace through placements and compare strategies). See docs/placement-format.md and
// docs/placement-results.md.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "placement/compare.h"
#include "placement/frontier.h"
#include "placement/placement_io.h"
#include "placement/report.h"
#include "placement/trace_io.h"
#include "tools/cmd_place_budget.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {
namespace {

using namespace epserve::placement;

// "stage: 12/26 layers, eta 3s" on a terminal, redrawn in place; nothing when stderr is piped.
class TerminalProgress {
 public:
  TerminalProgress() : enabled_(::isatty(2) != 0) {}
  ~TerminalProgress() { Finish(); }

  void Update(const std::string& stage, int done, int total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (stage != stage_) {
      Finish();
      stage_ = stage;
      start_ = now;
    } else if (done < total && now - last_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta = done > 0 ? elapsed * (total - done) / done : 0.0;
    std::fprintf(stderr, "\r\033[K%s: %d/%d layers, eta %.0fs", stage.c_str(), done, total, eta);
    std::fflush(stderr);
    open_ = true;
  }

  // Ends the current line so later output starts clean.
  void Finish() {
    if (open_) std::fprintf(stderr, "\n");
    open_ = false;
    stage_.clear();
  }

 private:
  bool enabled_;
  bool open_ = false;
  std::string stage_;
  std::chrono::steady_clock::time_point start_, last_;
};

// Options shared by `place` and `place evaluate --compare`.
struct StrategyFlags {
  int nodes = 1;
  int ranks_per_node = 1;
  std::string eplb_mode = "auto";
  int expert_groups = 0;
  bool no_replication = false;
  bool no_machine_replication = false;
  bool no_rank_rebalance = false;
  std::string machine_grouping = "nonuniform";
  std::string grouping = "metis";
  std::string rank_grouping = "load";
  bool as_placed = false;
  int selection_deals = 4;
  double r = -1;
  uint64_t seed = 1;
  int threads = 1;
  double train_fraction = 0;
};

struct PlaceFlags {
  StrategyFlags common;
  std::vector<std::string> trace;
  std::string strategy = "grace";
  std::string out;
  BudgetFlags budget;
  std::string routing;
  std::string format = "epserve";
  bool verbose = false;
};

struct EvaluateFlags {
  StrategyFlags common;
  std::string placement;
  std::vector<std::string> trace;
  std::vector<std::string> profile_trace;
  std::string compare;
  std::string frontier;
  BudgetFlags budget;
  std::string routing;
  bool json = false;
  bool per_layer = false;
  int step_tokens = 1024;
  uint64_t deal_seed = 0;
  CostModel cost;
};

void AddStrategyOptions(CLI::App* cmd, StrategyFlags* f) {
  cmd->add_option("--nodes", f->nodes, "machines")->check(IntRange(1, 4096))->capture_default_str();
  cmd->add_option("--ranks-per-node", f->ranks_per_node, "ranks (GPUs) per machine")
      ->check(IntRange(1, 4096))
      ->capture_default_str();
  cmd->add_option("--eplb-mode", f->eplb_mode,
                  "eplb: auto (hierarchical when the expert groups divide over the machines) | "
                  "hierarchical | global")
      ->check(CLI::IsMember({"auto", "hierarchical", "global"}))
      ->capture_default_str();
  cmd->add_option("--expert-groups", f->expert_groups,
                  "eplb hierarchical: expert groups (0: the model's, else one per rank)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_flag("--no-replication", f->no_replication,
                "grace: no hot-expert copies; eplb: no redundant copies");
  cmd->add_flag("--no-machine-replication", f->no_machine_replication,
                "grace: skip the machine-level replication step (copies of the heaviest "
                "machine's hot experts on the other machines); only the heaviest rank's");
  cmd->add_flag("--no-rank-rebalance", f->no_rank_rebalance,
                "grace: skip the rank-level rebalancing (moves and swaps of copies between the "
                "ranks of one machine to even out their predicted loads)");
  cmd->add_option("--r", f->r,
                  "grace: fixed non-uniformity ratio r in [0, 100] instead of the knee")
      ->check(RealRange(0, 100));
  cmd->add_option("--machine-grouping", f->machine_grouping,
                  "grace: nonuniform (SPEC §8: fully non-uniform over machines) | controlled "
                  "(experiment: controlled sizes with r at the knee, as for ranks)")
      ->check(CLI::IsMember({"nonuniform", "controlled"}))
      ->capture_default_str();
  cmd->add_option("--grouping", f->grouping,
                  "grace: metis (min-cut split, local search on the profiled cross-machine "
                  "copies, copies that save the most of them) | spectral (SPEC §8: spectral "
                  "clustering, controlled sizes at the knee, load-skew replication)")
      ->check(CLI::IsMember({"metis", "spectral"}))
      ->capture_default_str();
  cmd->add_option("--rank-grouping", f->rank_grouping,
                  "grace (metis): how each machine's experts are split over its ranks: load "
                  "(heaviest first onto the lightest rank; evens each step's load) | affinity "
                  "(METIS on the co-activation graph; fewer NVLink copies, burstier ranks)")
      ->check(CLI::IsMember({"load", "affinity"}))
      ->capture_default_str();
  cmd->add_flag("--as-placed", f->as_placed,
                "grace: write what the grouping placed; without it each layer gets the "
                "candidate (grace, the min-cut machines without copies, eplb with the same copies, "
                "contiguous) with the lowest modeled time on the profile");
  cmd->add_option("--selection-deals", f->selection_deals,
                  "grace: deals of the profile's prompts to the ranks over which each candidate's "
                  "modeled time is averaged before the per-layer choice (one deal's time is the "
                  "slowest rank of a few steps, i.e. noisy)")
      ->check(IntRange(1, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "seed of the k-means starts")->capture_default_str();
  cmd->add_option("--threads", f->threads, "layers worked on in parallel")
      ->check(IntRange(1, 1024))
      ->capture_default_str();
  cmd->add_option("--train-fraction", f->train_fraction,
                  "profile on this leading fraction of the trace's sequences (0: all)")
      ->check(RealRange(0, 1))
      ->capture_default_str();
}

StatusOr<EplbMode> ParseEplbMode(const std::string& s) {
  if (s == "auto") return EplbMode::kAuto;
  if (s == "hierarchical") return EplbMode::kHierarchical;
  if (s == "global") return EplbMode::kGlobal;
  return Status::InvalidArgument("unknown EPLB mode " + s);
}

StatusOr<Trace> LoadTrace(const std::vector<std::string>& paths) {
  return LoadAnyTrace(paths, TraceImportOptions{});
}

// The part of `trace` to profile on (train_fraction > 0: the leading sequences) and the rest.
StatusOr<TraceSplit> SplitOrWhole(Trace trace, double train_fraction) {
  if (train_fraction == 0) return TraceSplit{trace, trace};
  return SplitTrace(trace, train_fraction);
}

GraceOptions MakeGraceOptions(const StrategyFlags& f) {
  GraceOptions g;
  g.fixed_r = f.r;
  g.replication = !f.no_replication;
  g.machine_replication = !f.no_machine_replication;
  g.rank_rebalance = !f.no_rank_rebalance;
  g.seed = f.seed;
  g.grouping = f.grouping == "spectral" ? Grouping::kSpectral : Grouping::kMinCut;
  g.rank_grouping = f.rank_grouping == "affinity" ? RankGrouping::kAffinity : RankGrouping::kLoad;
  g.machine_grouping = f.machine_grouping == "controlled" ? MachineGrouping::kControlled
                                                          : MachineGrouping::kNonUniform;
  return g;
}

void RunPlace(const PlaceFlags& flags, CommandContext& ctx) {
  if (flags.trace.empty() || flags.out.empty()) {
    return ReportError(ctx, "place needs --trace and --out (or the evaluate subcommand)");
  }
  Status same = CheckNotSameFile("--out", flags.out, "--trace", flags.trace);
  if (same.ok()) same = CheckWritable("--out", flags.out);
  if (!same.ok()) return ReportError(ctx, same.message());
  PlaceOptions options;
  options.topology = Topology{flags.common.nodes, flags.common.ranks_per_node};
  StatusOr<Strategy> strategy = ParseStrategy(flags.strategy);
  if (!strategy.ok()) return ReportError(ctx, strategy.status().message());
  options.strategy = *strategy;
  if (!flags.routing.empty()) {
    StatusOr<RoutingPolicy> routing = ParseRoutingPolicy(flags.routing);
    if (!routing.ok()) return ReportError(ctx, routing.status().message());
    options.routing = *routing;
  }
  StatusOr<EplbMode> mode = ParseEplbMode(flags.common.eplb_mode);
  if (!mode.ok()) return ReportError(ctx, mode.status().message());
  options.eplb = EplbOptions{.mode = *mode, .num_groups = flags.common.expert_groups};
  options.grace = MakeGraceOptions(flags.common);
  options.selection = flags.common.as_placed ? Selection::kAsPlaced : Selection::kBestOnProfile;
  options.selection_deals = flags.common.selection_deals;
  options.num_threads = flags.common.threads;

  StatusOr<Trace> trace = LoadTrace(flags.trace);
  if (!trace.ok()) return ReportError(ctx, trace.status().message());
  BudgetFlags budget_flags = flags.budget;
  budget_flags.no_replication = flags.common.no_replication;
  const int weight_bytes = CostModel{}.weight_bytes;
  StatusOr<int> budget = ResolveBudget(budget_flags, *trace, weight_bytes);
  if (!budget.ok()) return ReportError(ctx, budget.status().message());
  options.SetCopyBudget(*budget);
  const std::string budget_text = DescribeBudget(*budget, *trace, weight_bytes);
  StatusOr<TraceSplit> split = SplitOrWhole(std::move(*trace), flags.common.train_fraction);
  if (!split.ok()) return ReportError(ctx, split.status().message());
  TerminalProgress progress;
  options.progress = [&](int done, int total) { progress.Update("placing", done, total); };
  StatusOr<PlaceResult> result = Place(split->profile, options);
  progress.Finish();
  if (!result.ok()) return ReportError(ctx, result.status().message());
  if (flags.verbose) {
    for (const GraceLayerReport& r : result->grace_reports) {
      std::printf("%s", FormatGraceReport(r).c_str());
    }
    const ChoiceReport& choice = result->choice;
    for (size_t l = 0; l < choice.chosen.size(); ++l) {
      std::printf("layer %d: modeled us on the profile:", result->placement.layers[l].layer_id);
      for (size_t c = 0; c < choice.candidates.size(); ++c) {
        std::printf(" %s %.1f", choice.candidates[c].c_str(), choice.time_us[c][l]);
      }
      std::printf(" -> %s\n", choice.candidates[choice.chosen[l]].c_str());
    }
  }
  Status st = flags.format == "sglang"
                  ? SaveSglangPlacement(result->placement, result->expert_load, flags.out)
                  : SavePlacement(result->placement, flags.out);
  if (!st.ok()) return ReportError(ctx, st.message());
  std::printf(
      "placed %d layers with %s on %d x %d ranks (%d extra copies, routing %s); wrote %s\n"
      "budget: %s\n",
      static_cast<int>(result->placement.layers.size()), flags.strategy.c_str(), flags.common.nodes,
      flags.common.ranks_per_node, result->placement.NumExtraCopies(),
      std::string(RoutingPolicyName(result->placement.routing)).c_str(), flags.out.c_str(),
      budget_text.c_str());
}

void RunCompare(const EvaluateFlags& flags, CommandContext& ctx) {
  CompareOptions options;
  options.topology = Topology{flags.common.nodes, flags.common.ranks_per_node};
  if (flags.compare.empty()) {
    options.variants = FrontierVariants();
  } else if (flags.compare == "all") {
    options.variants = AllVariants();
  } else {
    options.variants.clear();
    std::stringstream in(flags.compare);
    for (std::string v; std::getline(in, v, ',');) {
      if (!v.empty()) options.variants.push_back(v);
    }
  }
  StatusOr<EplbMode> mode = ParseEplbMode(flags.common.eplb_mode);
  if (!mode.ok()) return ReportError(ctx, mode.status().message());
  options.eplb = EplbOptions{.mode = *mode, .num_groups = flags.common.expert_groups};
  options.grace = MakeGraceOptions(flags.common);
  options.selection_deals = flags.common.selection_deals;
  options.evaluate.cost = flags.cost;
  options.evaluate.step_tokens_per_rank = flags.step_tokens;
  options.evaluate.deal_seed = flags.deal_seed;
  options.num_threads = flags.common.threads;
  if (!flags.routing.empty()) {
    return ReportError(ctx, "with --compare, give routing per variant (e.g. eplb+topo)");
  }

  StatusOr<Trace> trace = LoadTrace(flags.trace);
  if (!trace.ok()) return ReportError(ctx, trace.status().message());
  std::unique_ptr<TraceSplit> parts;
  if (!flags.profile_trace.empty()) {
    StatusOr<Trace> profile = LoadTrace(flags.profile_trace);
    if (!profile.ok()) return ReportError(ctx, profile.status().message());
    parts = std::make_unique<TraceSplit>(TraceSplit{std::move(*profile), std::move(*trace)});
  } else if (flags.common.train_fraction > 0) {
    StatusOr<TraceSplit> split = SplitTrace(*trace, flags.common.train_fraction);
    if (!split.ok()) return ReportError(ctx, split.status().message());
    parts = std::make_unique<TraceSplit>(std::move(*split));
  } else {
    return ReportError(ctx,
                       "--compare needs --profile-trace or --train-fraction: placements are "
                       "profiled on one part of the traffic and evaluated on another");
  }
  const int weight_bytes = flags.cost.weight_bytes;
  const Trace& placed = parts->profile;  // the budget is for the layers it places
  TerminalProgress progress;
  auto update = [&](const std::string& stage, int done, int total) {
    progress.Update(stage, done, total);
  };
  if (!flags.frontier.empty()) {
    if (BudgetGiven(flags.budget) || flags.common.no_replication) {
      return ReportError(ctx,
                         "--frontier " + flags.frontier +
                             ": the frontier sets the copy budget itself; drop --redundant-slots, "
                             "--copy-budget-gb, --redundant and --no-replication");
    }
    StatusOr<std::string> out = FrontierReport(flags.frontier, *parts, options, flags.json, update);
    progress.Finish();
    if (!out.ok()) return ReportError(ctx, out.status().message());
    std::printf("%s", out->c_str());
    return;
  }
  BudgetFlags budget_flags = flags.budget;
  budget_flags.no_replication = flags.common.no_replication;
  StatusOr<int> budget = ResolveBudget(budget_flags, placed, weight_bytes);
  if (!budget.ok()) return ReportError(ctx, budget.status().message());
  options.redundant = *budget;
  options.progress = update;
  StatusOr<std::vector<CompareRow>> rows = Compare(parts->profile, parts->holdout, options);
  progress.Finish();
  if (!rows.ok()) return ReportError(ctx, rows.status().message());
  if (flags.json) {
    std::printf("%s", CompareJson(*rows, options.topology, flags.cost, flags.step_tokens).c_str());
    return;
  }
  std::printf("profile %lld tokens, evaluate %lld tokens, %d x %d ranks\nbudget: %s\n%s",
              static_cast<long long>(parts->profile.num_tokens()),
              static_cast<long long>(parts->holdout.num_tokens()), flags.common.nodes,
              flags.common.ranks_per_node, DescribeBudget(*budget, placed, weight_bytes).c_str(),
              FormatCompareTable(*rows).c_str());
  if (flags.per_layer) {
    for (const CompareRow& row : *rows) {
      std::printf("\n%s\n%s", row.label.c_str(), FormatLayerTable(row.evaluation).c_str());
    }
  }
}

void RunEvaluate(const EvaluateFlags& flags, CommandContext& ctx) {
  if (flags.trace.empty()) return ReportError(ctx, "evaluate needs --trace");
  if (!flags.compare.empty() || !flags.frontier.empty()) return RunCompare(flags, ctx);
  if (flags.placement.empty()) {
    return ReportError(ctx, "evaluate needs --placement, --compare or --frontier");
  }
  if (BudgetGiven(flags.budget)) {
    return ReportError(ctx,
                       "a copy budget (--redundant-slots, --copy-budget-gb, --redundant) places "
                       "with --compare or --frontier; --placement is already placed");
  }
  StatusOr<Placement> placement = LoadPlacement(flags.placement);
  if (!placement.ok()) return ReportError(ctx, placement.status().message());
  StatusOr<Trace> trace = LoadTrace(flags.trace);
  if (!trace.ok()) return ReportError(ctx, trace.status().message());
  if (Status fits = CheckPlacementFitsTrace(*placement, *trace); !fits.ok())
    return ReportError(ctx, fits.WithContext(flags.placement).message());
  // With a train fraction, evaluate on the sequences after it (those the placement was not
  // profiled on when `place` got the same fraction).
  StatusOr<TraceSplit> split = SplitOrWhole(std::move(*trace), flags.common.train_fraction);
  if (!split.ok()) return ReportError(ctx, split.status().message());
  EvaluateOptions options;
  options.cost = flags.cost;
  options.step_tokens_per_rank = flags.step_tokens;
  options.deal_seed = flags.deal_seed;
  options.num_threads = flags.common.threads;
  if (!flags.routing.empty()) {
    StatusOr<RoutingPolicy> routing = ParseRoutingPolicy(flags.routing);
    if (!routing.ok()) return ReportError(ctx, routing.status().message());
    options.routing = *routing;
  }
  TerminalProgress progress;
  options.progress = [&](int done, int total) { progress.Update("evaluating", done, total); };
  StatusOr<Evaluation> eval = Evaluate(*placement, split->holdout, options);
  progress.Finish();
  if (!eval.ok()) return ReportError(ctx, eval.status().message());
  const std::string label = placement->strategy.empty() ? "placement" : placement->strategy;
  if (flags.json) {
    std::printf("%s", EvaluationJson(*eval, label).c_str());
    return;
  }
  std::printf("%s on %d x %d ranks, routing %s: %lld tokens in %d steps\n%s", label.c_str(),
              placement->topology.num_nodes, placement->topology.ranks_per_node,
              std::string(RoutingPolicyName(options.routing.value_or(placement->routing))).c_str(),
              static_cast<long long>(eval->num_tokens), eval->num_steps,
              FormatLayerTable(*eval).c_str());
}

}  // namespace

void RegisterPlaceCommand(CLI::App& app, CommandContext& ctx) {
  auto pf = std::make_shared<PlaceFlags>();
  CLI::App* place = app.add_subcommand(
      "place",
      "Place experts on machines and ranks from a routing trace (docs/placement-format.md):\n"
      "  contiguous  equal slices of expert ids\n"
      "  eplb        DeepSeek's EPLB (hierarchical or global) with the copy budget's slots\n"
      "  grace       GRACE-MoE: affinity grouping, hot-expert replication, routing table");
  place->require_subcommand(0, 1);
  place->add_option("--trace", pf->trace,
                    "trace: epserve trace file, *.jsonl, or CSV files/folder (V2-Lite shape)");
  place->add_option("--strategy", pf->strategy, "contiguous | eplb | grace")
      ->check(CLI::IsMember({"contiguous", "eplb", "grace"}))
      ->capture_default_str();
  place->add_option("--out", pf->out, "placement file to write");
  AddBudgetOptions(place, &pf->budget);
  place
      ->add_option("--routing", pf->routing,
                   "wrr | topo (default: topo for grace, wrr for the others)")
      ->check(CLI::IsMember({"wrr", "topo"}));
  place
      ->add_option("--format", pf->format,
                   "epserve | sglang ({\"physical_to_logical_map\": ...} for SGLang)")
      ->check(CLI::IsMember({"epserve", "sglang"}))
      ->capture_default_str();
  place->add_flag("--verbose", pf->verbose,
                  "grace: print each layer's U(r)/S(r) curve, knee and replication");
  AddStrategyOptions(place, &pf->common);

  auto ef = std::make_shared<EvaluateFlags>();
  CLI::App* eval = place->add_subcommand(
      "evaluate",
      "Replay a trace through a placement (or, with --compare, through several strategies placed\n"
      "on a profiling part) and report token copies kept / within a machine / across machines,\n"
      "per-rank load and a modeled MoE-layer time (docs/placement-results.md).");
  eval->add_option("--placement", ef->placement, "placement file to evaluate");
  eval->add_option("--trace", ef->trace, "trace to replay (the evaluation part)")->required();
  eval->add_option("--profile-trace", ef->profile_trace, "--compare: trace to place from");
  eval->add_option("--compare", ef->compare,
                   "comma-separated variants, e.g. contiguous,eplb,grace or "
                   "eplb+global+topo,grace+norep; 'all' for every step");
  eval->add_option("--frontier", ef->frontier,
                   "compare under each copy budget of this comma-separated list (8: slots per "
                   "layer; 12.5%: that share of the routed experts) and print grace's "
                   "cross-machine copies and time against the best eplb row and the fastest "
                   "rival per budget; variants from --compare or contiguous, every eplb mode, "
                   "grace");
  AddBudgetOptions(eval, &ef->budget);
  eval->add_option("--routing", ef->routing, "override the placement's routing: wrr | topo")
      ->check(CLI::IsMember({"wrr", "topo"}));
  eval->add_flag("--json", ef->json, "print one JSON object instead of tables");
  eval->add_flag("--per-layer", ef->per_layer, "--compare: also print per-layer tables");
  eval->add_option("--step-tokens", ef->step_tokens, "tokens per rank per all-to-all step")
      ->check(IntRange(1, 1 << 30))
      ->capture_default_str();
  eval->add_option("--deal-seed", ef->deal_seed,
                   "0: sequence i starts on rank i mod R; else the sequences are shuffled by this "
                   "seed first (another deal of the same prompts to the ranks)")
      ->capture_default_str();
  eval->add_option("--expert-tflops", ef->cost.expert_tflops, "achieved expert GEMM TFLOP/s")
      ->check(PositiveReal())
      ->capture_default_str();
  eval->add_option("--hbm-gbps", ef->cost.hbm_gbytes_per_s, "HBM GB/s per rank")
      ->check(PositiveReal())
      ->capture_default_str();
  eval->add_option("--ib-gbps", ef->cost.ib_gbytes_per_s, "InfiniBand GB/s per rank")
      ->check(PositiveReal())
      ->capture_default_str();
  eval->add_option("--nvlink-gbps", ef->cost.nvlink_gbytes_per_s, "NVLink GB/s per rank")
      ->check(PositiveReal())
      ->capture_default_str();
  eval->add_option("--activation-bytes", ef->cost.activation_bytes, "bytes per hidden element")
      ->check(IntRange(1, 16))
      ->capture_default_str();
  AddStrategyOptions(eval, &ef->common);

  eval->callback([ef, &ctx] { RunEvaluate(*ef, ctx); });
  place->callback([pf, eval, &ctx] {
    if (eval->parsed()) return;
    RunPlace(*pf, ctx);
  });
}

}  // namespace epserve::tools
