#include "runtime/ep_runner.h"

#include <csignal>
#include <cstring>
#include <set>

#include "placement/placement_io.h"
#include "placement/router.h"
#include "runtime/ep_experts.h"
#include "runtime/ep_stats.h"
#include "runtime/loaded_model.h"

namespace epserve {

namespace {

std::string Serialize(const std::vector<int>& idx, const GenerateResult& res) {
  std::string s;
  auto put = [&s](const void* p, size_t n) { s.append(static_cast<const char*>(p), n); };
  int64_t count = static_cast<int64_t>(idx.size());
  put(&count, 8);
  for (size_t i = 0; i < idx.size(); ++i) {
    const RequestResult& r = res.requests[i];
    int64_t head[7] = {idx[i],
                       static_cast<int64_t>(r.tokens.size()),
                       static_cast<int64_t>(r.finish),
                       r.cached_prompt_tokens,
                       static_cast<int64_t>(r.error.size()),
                       static_cast<int64_t>(r.logits.size()),
                       r.first_token_step};
    put(head, sizeof(head));
    put(r.tokens.data(), r.tokens.size() * 4);
    put(r.error.data(), r.error.size());
    put(r.logits.data(), r.logits.size() * 4);
  }
  double times[2] = {res.prefill_seconds, res.decode_seconds};
  int64_t counts[4] = {res.prefill_tokens, res.decode_tokens, res.stats.draft_tokens,
                       res.stats.accepted_draft_tokens};
  put(times, 16);
  put(counts, 32);
  return s;
}

}  // namespace

EpError RunEpGenerate(comm::MpiWorld& mpi, const EpRunOptions& o, EpRunResult* out) {
  comm::Communicator& world = mpi.world();
  std::unique_ptr<EpReplica> rep;
  EpError built = BuildEpReplica(mpi,
                                 {.model_dir = o.model_dir,
                                  .tp = o.tp,
                                  .ranks_per_node = o.ranks_per_node,
                                  .a2a = o.a2a,
                                  .placement_path = o.placement_path,
                                  .threads = o.threads,
                                  .weights = o.weights,
                                  .requant = o.requant,
                                  .fail_load_rank = o.fail_load_rank,
                                  .mtp = o.engine.mtp},
                                 &rep);
  if (!built.status.ok()) return built;
  const bool v4 = rep->family == ModelFamily::kDeepSeekV4;
  if (v4) {
    // Every rank finds the same: an error for all, printed once.
    const std::string what = o.model_dir + " is a DeepSeek-V4 checkpoint: ";
    if (o.online)
      return {Status::InvalidArgument(what + "--replace-every (online re-placement) is not "
                                             "built for V4 yet"),
              true};
    if (Status s = rep->v4_model->CheckEngineOptions(o.engine.kv_dtype, o.engine.mtp,
                                                     o.engine.overlap, o.engine.compute);
        !s.ok())
      return {s.WithContextOnce(what.substr(0, what.size() - 2)), true};
  } else if (Status s = CheckMtp(rep->config, o.engine.mtp); !s.ok()) {
    return {s, true};
  }
  const ModelConfig& config = rep->config;
  const int n = rep->num_ranks, me = rep->rank, dp = rep->dp, group = rep->group;
  const std::vector<int>& node_of = rep->node_of;
  const int num_nodes = rep->num_nodes;
  ForwardPass& model = rep->forward();
  EpExperts& experts = *rep->experts;

  std::vector<GenerateRequest> requests, group_requests;
  std::vector<int> request_idx;
  for (size_t i = 0; i < o.requests.size(); ++i)
    if (static_cast<int>(i % dp) == group) {
      group_requests.push_back(o.requests[i]);
      group_requests.back().sequence_id = static_cast<uint32_t>(i);
      request_idx.push_back(static_cast<int>(i));
    }
  const bool leader = me % o.tp == 0;
  if (leader) requests = group_requests;
  // Every rank of a group sizes its pool alike (followers replay the leader's block ids).
  EngineOptions eng = o.engine;
  if (eng.num_blocks == 0) {
    if (o.kv_memory_bytes == 0)
      eng.num_blocks = BlocksForAll(group_requests, eng.block_size);
    else if (v4)
      eng.num_blocks = KvMemoryBlocks(model.CacheLayout(eng.kv_dtype, eng.mtp), eng.kv_dtype,
                                      eng.block_size, o.kv_memory_bytes);
    else
      eng.num_blocks =
          KvMemoryBlocks(config, eng.kv_dtype, eng.block_size, o.kv_memory_bytes, eng.mtp);
    if (eng.num_blocks < 1)
      return {Status::InvalidArgument("--kv-memory " + std::to_string(o.kv_memory_bytes) +
                                      " bytes holds no cache block"),
              true};
  }
  eng.keep_logits = o.keep_logits;
  if (!v4) eng.default_stop_ids = config.eos_token_ids;  // V4: as one process runs it
  Engine engine(model, eng);
  std::unique_ptr<OnlinePlacer> placer;
  if (o.online) {
    OnlinePlacerOptions po = *o.online;
    po.load.memory = o.weights;
    po.load.requant = o.requant;
    auto made = OnlinePlacer::Create(*rep, po);
    if (!made.ok()) return {made.status(), true};
    placer = std::move(*made);
    rep->model->SetRouteObserver([p = placer.get()](const RouteEvent& ev) { p->Observe(ev); });
  }
  GenerateOptions gen{.keep_logits = o.keep_logits,
                      .on_step =
                          [&](int step) {
                            if (me == o.kill_rank && step == o.kill_step)
                              std::raise(o.stop_instead ? SIGSTOP : SIGKILL);
                          },
                      .world = &world,
                      .group = rep->group_comm.get(),
                      .participant = placer.get()};
  auto res = RunRequests(engine, requests, gen);
  if (!res.ok()) return {res.status().WithContextOnce("rank " + std::to_string(me)), false};
  if (placer) {
    if (Status s = placer->Finish(); !s.ok())
      return {s.WithContextOnce("rank " + std::to_string(me)), false};
  }

  // Results to rank 0: one blob per DP group (its TP rank 0), empty from the others.
  std::vector<std::string> blobs;
  Status gs = world.GatherBlobs(leader ? Serialize(request_idx, *res) : std::string(), 0, &blobs);
  if (!gs.ok()) return {gs, false};
  std::vector<std::string> stat_blobs;
  gs = world.GatherBlobs(SerializeRankStats(v4 ? StepTimes{} : rep->model->times(), experts,
                                            res->prefill_seconds + res->decode_seconds),
                         0, &stat_blobs);
  if (!gs.ok()) return {gs, false};
  if (me != 0) return {Status::Ok(), false};

  out->vocab = model.vocab_size();
  out->num_ranks = n, out->tp = o.tp, out->dp = dp, out->num_nodes = num_nodes;
  out->requests.assign(o.requests.size(), {});
  out->group_batch.assign(dp, 0);
  out->cache_blocks = eng.num_blocks;
  out->block_size = eng.block_size;
  if (!v4) {
    out->split_forwards = rep->model->split_forwards();
    out->forwards = rep->model->forwards();
  }
  for (int r = 0; r < n; ++r) {
    const std::string& b = blobs[r];
    if (b.empty()) continue;
    const char* p = b.data();
    auto get = [&p](void* dst, size_t len) {
      std::memcpy(dst, p, len);
      p += len;
    };
    int64_t count;
    get(&count, 8);
    out->group_batch[r / o.tp] = static_cast<int>(count);
    for (int64_t i = 0; i < count; ++i) {
      int64_t head[7];
      get(head, sizeof(head));
      RequestResult& rr = out->requests[head[0]];
      rr.tokens.resize(head[1]);
      rr.finish = static_cast<FinishReason>(head[2]);
      rr.cached_prompt_tokens = head[3];
      rr.error.resize(head[4]);
      rr.logits.resize(head[5]);
      rr.first_token_step = static_cast<int>(head[6]);
      get(rr.tokens.data(), head[1] * 4);
      get(rr.error.data(), head[4]);
      get(rr.logits.data(), head[5] * 4);
    }
    double times[2];
    int64_t counts[4];
    get(times, 16);
    get(counts, 32);
    out->draft_tokens += counts[2];
    out->accepted_draft_tokens += counts[3];
    out->prefill_seconds = std::max(out->prefill_seconds, times[0]);
    out->decode_seconds = std::max(out->decode_seconds, times[1]);
    out->prefill_tokens += counts[0];
    out->decode_tokens += counts[1];
  }
  if (!v4) out->stats_table = FormatStats(stat_blobs, node_of, config);
  if (placer) {
    out->placer_report = placer->FormatReports();
    out->replacements = placer->reports();
  }
  return {Status::Ok(), false};
}

}  // namespace epserve
