#include "runtime/online_placer.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <set>

#include "base/timer.h"
#include "placement/budget.h"
#include "placement/place.h"
#include "placement/placement_io.h"
#include "runtime/ep_experts.h"

namespace epserve {

namespace {

std::atomic<bool> g_requested{false};

void OnSignal(int) { g_requested.store(true); }

// Places the gathered sketches; returns the placement as JSON, or "" (with `why`) to keep the
// current one.
std::string PlaceFromSketches(const std::vector<std::string>& sketches,
                              const placement::Placement& current, const ModelConfig& config,
                              const std::vector<int>& layers, int64_t min_tokens,
                              int redundant_slots, int64_t* tokens, std::string* why) {
  placement::ModelShape shape = ModelShapeOf(config);
  shape.name = "live";
  placement::Trace trace(std::move(shape), layers, placement::GateWeights::kAbsent);
  for (size_t r = 0; r < sketches.size(); ++r) {
    if (sketches[r].empty()) continue;
    // Sequence ids of different groups must differ; a group's own are already distinct.
    Status st = RoutingSketch::AppendTo(sketches[r], static_cast<uint32_t>(r) << 24, &trace);
    if (!st.ok()) {
      *why = "rank " + std::to_string(r) + ": " + st.message();
      return "";
    }
  }
  *tokens = trace.num_tokens();
  if (trace.num_tokens() < min_tokens) {
    *why = std::to_string(trace.num_tokens()) + " tokens profiled, fewer than " +
           std::to_string(min_tokens);
    return "";
  }
  placement::PlaceOptions po;
  po.topology = current.topology;
  po.strategy = placement::Strategy::kGrace;
  const int slots = redundant_slots >= 0
                        ? redundant_slots
                        : placement::DefaultRedundantSlots(config.n_routed_experts);
  po.SetCopyBudget(slots);
  po.num_threads = 1;  // beside the serving threads
  StatusOr<placement::PlaceResult> placed = placement::Place(trace, po);
  if (!placed.ok()) {
    *why = placed.status().message();
    return "";
  }
  placement::Placement p = std::move(placed->placement);
  // Layers the sketch does not see (the MTP module's) keep their placement.
  for (const placement::LayerPlacement& l : current.layers)
    if (p.LayerIndex(l.layer_id) < 0) p.layers.push_back(l);
  std::sort(p.layers.begin(), p.layers.end(),
            [](const auto& a, const auto& b) { return a.layer_id < b.layer_id; });
  p.model.num_hidden_layers = current.model.num_hidden_layers;
  return placement::PlacementToJson(p);
}

}  // namespace

void OnlinePlacer::Request() { g_requested.store(true); }

void OnlinePlacer::InstallSignalHandler() { std::signal(SIGUSR2, OnSignal); }

StatusOr<std::unique_ptr<OnlinePlacer>> OnlinePlacer::Create(EpReplica& rep,
                                                             const OnlinePlacerOptions& o) {
  if (o.replace_every < 0) return Status::InvalidArgument("--replace-every must be >= 0");
  if (o.window_tokens < 1) return Status::InvalidArgument("--replace-window must be >= 1");
  if (o.redundant_slots > placement::MaxRedundantSlots(rep.config.n_routed_experts))
    return Status::InvalidArgument(
        "--replace-slots " + std::to_string(o.redundant_slots) + " is more than " +
        std::to_string(placement::MaxRedundantSlots(rep.config.n_routed_experts)));
  std::vector<int> layers;
  for (int l = 0; l < rep.config.num_hidden_layers; ++l)
    if (rep.config.IsMoeLayer(l)) layers.push_back(l);
  InstallSignalHandler();
  return std::unique_ptr<OnlinePlacer>(new OnlinePlacer(rep, o, std::move(layers)));
}

OnlinePlacer::OnlinePlacer(EpReplica& rep, const OnlinePlacerOptions& o, std::vector<int> layers)
    : rep_(rep),
      options_(o),
      layers_(layers),
      sketch_(layers, rep.config.num_experts_per_tok, o.window_tokens) {}

OnlinePlacer::~OnlinePlacer() { JoinWorker(); }

void OnlinePlacer::JoinWorker() {
  if (worker_.joinable()) worker_.join();
}

void OnlinePlacer::Observe(const RouteEvent& event) {
  if (rep_.leader()) sketch_.Observe(event);
}

void OnlinePlacer::Vote(StepVote* vote) {
  switch (phase_) {
    case Phase::kIdle:
      // The request stays set until a gather runs: a vote on an idle poll (no AfterVote)
      // must not use it up.
      if ((options_.replace_every > 0 && steps_since_ >= options_.replace_every) ||
          g_requested.load())
        vote->placer_gather = 1;
      break;
    case Phase::kPlacing:
      if (rep_.rank == 0 && worker_done_.load()) vote->placer_ready = 1;
      break;
    case Phase::kLoading:
      if (!worker_done_.load()) {
        vote->placer_loading = 1;
      } else if (!load_status_.ok()) {
        vote->placer_failed = 1;
      }
      break;
  }
}

Status OnlinePlacer::AfterVote(const StepVote& vote) {
  const int step = steps_++;
  ++steps_since_;
  const double t0 = NowSeconds();
  Status st = Status::Ok();
  if (phase_ == Phase::kIdle && vote.placer_gather) {
    g_requested.store(false);  // this gather answers every request so far, on every rank
    steps_since_ = 0;
    pause_seconds_ = 0;
    st = Gather();
  } else if (phase_ == Phase::kPlacing && vote.placer_ready) {
    st = StartLoading();
  } else if (phase_ == Phase::kLoading && !vote.placer_loading) {
    JoinWorker();
    if (vote.placer_failed) {
      if (options_.log && rep_.rank == 0)
        std::fprintf(stderr, "re-placement dropped: a rank could not load its experts%s%s\n",
                     load_status_.ok() ? "" : ": ", load_status_.message().c_str());
      loaded_.clear();
      next_plan_.reset();
      next_router_.reset();
      phase_ = Phase::kIdle;
    } else {
      pause_seconds_ += NowSeconds() - t0;
      return Switch(step);
    }
  } else {
    return Status::Ok();
  }
  pause_seconds_ += NowSeconds() - t0;
  return st;
}

Status OnlinePlacer::Gather() {
  comm::Communicator& world = rep_.dispatcher->communicator();
  sketches_.clear();
  RETURN_IF_ERROR(
      world.GatherBlobs(rep_.leader() ? sketch_.Serialize() : std::string(), 0, &sketches_));
  RETURN_IF_ERROR(MeasureSinceSwitch());  // the live measure /metrics shows
  phase_ = Phase::kPlacing;
  worker_done_.store(false);
  placed_json_.clear();
  if (rep_.rank != 0) return Status::Ok();
  // Rank 0 places in the background; the others only wait for its vote.
  worker_ = std::thread([this] {
    const double t0 = NowSeconds();
    std::string why;
    placed_json_ =
        PlaceFromSketches(sketches_, *rep_.plan, rep_.config, layers_, options_.min_tokens,
                          options_.redundant_slots, &profile_tokens_, &why);
    place_seconds_ = NowSeconds() - t0;
    if (placed_json_.empty() && options_.log)
      std::fprintf(stderr, "re-placement skipped: %s\n", why.c_str());
    worker_done_.store(true);
  });
  return Status::Ok();
}

Status OnlinePlacer::StartLoading() {
  JoinWorker();
  comm::Communicator& world = rep_.dispatcher->communicator();
  std::string json = rep_.rank == 0 ? placed_json_ : std::string();
  RETURN_IF_ERROR(world.Broadcast(&json, 0));
  if (json.empty()) {  // rank 0 keeps the placement
    phase_ = Phase::kIdle;
    return Status::Ok();
  }
  phase_ = Phase::kLoading;
  worker_done_.store(false);
  load_status_ = Status::Ok();
  loaded_.clear();
  // Every rank checks the placement alike; a failure here is voted like a load failure.
  std::vector<std::pair<int, int>> gain;
  [&] {
    StatusOr<placement::Placement> plan = placement::PlacementFromJson(json, "re-placement");
    if (!plan.ok()) {
      load_status_ = plan.status();
      return;
    }
    StatusOr<placement::Router> router = placement::Router::Create(*plan, plan->routing);
    if (!router.ok()) {
      load_status_ = router.status();
      return;
    }
    const ModelWeights& w = *rep_.loaded->weights;
    for (const placement::LayerPlacement& l : plan->layers) {
      const auto& experts = w.Layer(l.layer_id).moe->experts;
      for (int e : std::set<int>(l.slots[rep_.rank].begin(), l.slots[rep_.rank].end()))
        if (experts[e].empty()) gain.push_back({l.layer_id, e});
    }
    next_plan_ = std::make_unique<placement::Placement>(std::move(*plan));
    next_router_ = std::make_unique<placement::Router>(std::move(*router));
  }();
  if (!load_status_.ok()) {
    worker_done_.store(true);
    return Status::Ok();
  }
  worker_ = std::thread([this, gain] {
    const double t0 = NowSeconds();
    for (const auto& [layer, expert] : gain) {
      StatusOr<LoadedExpert> e =
          LoadExpert(*rep_.loaded->checkpoint, rep_.config, layer, expert, options_.load);
      if (!e.ok()) {
        load_status_ = e.status().WithContextOnce("rank " + std::to_string(rep_.rank));
        break;
      }
      loaded_.push_back(std::move(*e));
    }
    load_seconds_ = NowSeconds() - t0;
    worker_done_.store(true);
  });
  return Status::Ok();
}

void OnlinePlacer::TrafficTotals(int64_t* remote, int64_t* tokens) const {
  *remote = *tokens = 0;
  const std::vector<EpLayerStats>& stats = rep_.experts->layer_stats();
  for (int l : layers_) {
    *remote += stats[l].dispatch.rows_remote;
    *tokens += stats[l].tokens_sent;
  }
}

Status OnlinePlacer::Switch(int step) {
  const double t0 = NowSeconds();
  ModelWeights& w = *rep_.loaded->weights;
  int64_t loaded = 0, bytes = 0, freed = 0;
  for (LoadedExpert& e : loaded_) {
    bytes += e.bytes;
    ++loaded;
    InstallExpert(w, std::move(e));
  }
  loaded_.clear();
  rep_.experts->SetPlacement(*next_plan_, *next_router_);
  rep_.plan = std::move(next_plan_);
  rep_.router = std::move(next_router_);
  // Experts this rank no longer holds go (the old placement and router are gone with them).
  for (int l = 0; l < static_cast<int>(w.layers.size() + w.mtp.size()); ++l) {
    const int idx = rep_.plan->LayerIndex(l);
    if (idx < 0 || !w.Layer(l).moe) continue;
    const std::vector<int>& mine = rep_.plan->layers[idx].slots[rep_.rank];
    const std::set<int> keep(mine.begin(), mine.end());
    for (int e = 0; e < static_cast<int>(w.Layer(l).moe->experts.size()); ++e)
      if (!w.Layer(l).moe->experts[e].empty() && !keep.count(e)) {
        ReleaseExpert(w, l, e);
        ++freed;
      }
  }
  phase_ = Phase::kIdle;
  pause_seconds_ += NowSeconds() - t0;
  // World totals for the report (one more collective of this boundary).
  int64_t remote, tokens;
  TrafficTotals(&remote, &tokens);
  constexpr int kFields = 7;
  const int64_t mine[kFields] = {remote,
                                 tokens,
                                 loaded,
                                 bytes,
                                 freed,
                                 static_cast<int64_t>(load_seconds_ * 1e6),
                                 static_cast<int64_t>(pause_seconds_ * 1e6)};
  comm::Communicator& world = rep_.dispatcher->communicator();
  std::vector<int64_t> all(kFields * world.size());
  RETURN_IF_ERROR(world.AllGather(mine, sizeof(mine), all.data()));
  int64_t sum[kFields] = {}, max[kFields] = {};
  for (int r = 0; r < world.size(); ++r)
    for (int i = 0; i < kFields; ++i) {
      sum[i] += all[r * kFields + i];
      max[i] = std::max(max[i], all[r * kFields + i]);
    }
  ReplacementReport r;
  SinceSwitch(sum[0], sum[1], &r.cross_before, &r.tokens_before);
  if (!reports_.empty()) {
    reports_.back().cross_after = r.cross_before;
    reports_.back().tokens_after = r.tokens_before;
  }
  r.step = step;
  r.profile_tokens = profile_tokens_;
  r.place_seconds = place_seconds_;
  r.load_seconds = max[5] / 1e6;
  r.experts_loaded = sum[2];
  r.bytes_loaded = sum[3];
  r.experts_freed = sum[4];
  r.pause_ms = max[6] / 1e3;
  remote_at_switch_ = sum[0];
  tokens_at_switch_ = sum[1];
  cross_since_switch_ = 0;
  tokens_since_switch_ = 0;
  if (options_.log && rep_.rank == 0)
    std::fprintf(stderr,
                 "re-placement %zu before step %d: placed from %lld tokens in %.2f s, %lld experts "
                 "loaded (%.1f MB, %.2f s), %lld freed, pause %.2f ms; cross-machine copies per "
                 "token %.3f over the %lld tokens before\n",
                 reports_.size() + 1, step, static_cast<long long>(r.profile_tokens),
                 r.place_seconds, static_cast<long long>(r.experts_loaded), r.bytes_loaded / 1e6,
                 r.load_seconds, static_cast<long long>(r.experts_freed), r.pause_ms,
                 r.cross_before, static_cast<long long>(r.tokens_before));
  reports_.push_back(r);
  return Status::Ok();
}

Status OnlinePlacer::Finish() {
  JoinWorker();
  loaded_.clear();
  next_plan_.reset();
  next_router_.reset();
  phase_ = Phase::kIdle;
  RETURN_IF_ERROR(MeasureSinceSwitch());
  if (!reports_.empty()) {
    reports_.back().cross_after = cross_since_switch_;
    reports_.back().tokens_after = tokens_since_switch_;
  }
  return Status::Ok();
}

Status OnlinePlacer::MeasureSinceSwitch() {
  int64_t mine[2];
  TrafficTotals(&mine[0], &mine[1]);
  comm::Communicator& world = rep_.dispatcher->communicator();
  std::vector<int64_t> all(2 * world.size());
  RETURN_IF_ERROR(world.AllGather(mine, sizeof(mine), all.data()));
  int64_t remote = 0, tokens = 0;
  for (int r = 0; r < world.size(); ++r) remote += all[2 * r], tokens += all[2 * r + 1];
  if (tokens > tokens_at_switch_)
    SinceSwitch(remote, tokens, &cross_since_switch_, &tokens_since_switch_);
  return Status::Ok();
}

void OnlinePlacer::SinceSwitch(int64_t remote, int64_t token_layers, double* cross,
                               int64_t* tokens) const {
  const int num_layers = static_cast<int>(layers_.size());
  const int64_t rows = remote - remote_at_switch_, passed = token_layers - tokens_at_switch_;
  *cross = passed > 0 ? static_cast<double>(rows) * num_layers / passed : 0.0;
  *tokens = passed / std::max(1, num_layers);
}

void OnlinePlacer::AddMetrics(WorkerMetrics* m) const {
  if (rep_.rank != 0) return;
  m->replacements = static_cast<int64_t>(reports_.size());
  m->replacement_bytes = 0;
  m->replacement_pause_seconds = 0;
  for (const ReplacementReport& r : reports_) {
    m->replacement_bytes += r.bytes_loaded;
    m->replacement_pause_seconds += r.pause_ms / 1e3;
  }
  m->cross_copies_before = reports_.empty() ? -1 : reports_.back().cross_before;
  m->cross_copies_since = tokens_since_switch_ > 0 ? cross_since_switch_ : -1;
}

std::string OnlinePlacer::FormatReports() const {
  std::string s = "online re-placement: " + std::to_string(reports_.size()) + " switch" +
                  (reports_.size() == 1 ? "" : "es") + " in " + std::to_string(steps_) + " steps\n";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "  %4s %6s %8s %8s %8s %6s %6s %9s %9s %12s %12s\n", "#", "step",
                "profile", "place_s", "load_s", "loaded", "freed", "MB", "pause_ms", "cross_before",
                "cross_after");
  s += buf;
  for (size_t i = 0; i < reports_.size(); ++i) {
    const ReplacementReport& r = reports_[i];
    std::snprintf(buf, sizeof(buf),
                  "  %4zu %6d %8lld %8.2f %8.2f %6lld %6lld %9.2f %9.2f %12.4f %12.4f\n", i + 1,
                  r.step, static_cast<long long>(r.profile_tokens), r.place_seconds, r.load_seconds,
                  static_cast<long long>(r.experts_loaded), static_cast<long long>(r.experts_freed),
                  r.bytes_loaded / 1e6, r.pause_ms, r.cross_before, r.cross_after);
    s += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "cross-machine copies per token since the %s: %.4f over %lld tokens\n",
                reports_.empty() ? "start" : "last switch", cross_since_switch_,
                static_cast<long long>(tokens_since_switch_));
  s += buf;
  std::snprintf(buf, sizeof(buf),
                "routing sketch (rank 0): %lld tokens seen, %.2f us per step, %.2f us per 1000 "
                "tokens\n",
                static_cast<long long>(sketch_.observed()),
                steps_ ? sketch_.observe_seconds() * 1e6 / steps_ : 0.0,
                sketch_.observed() ? sketch_.observe_seconds() * 1e9 / sketch_.observed() : 0.0);
  s += buf;
  return s;
}

}  // namespace epserve
