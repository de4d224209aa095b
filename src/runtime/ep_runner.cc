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

// Every rank contributes its status; all return the first failure, naming its rank.
Status Agree(comm::Communicator& world, const Status& mine) {
  char buf[512] = {};
  if (!mine.ok()) std::snprintf(buf, sizeof(buf), "%s", mine.message().c_str());
  std::vector<char> all(sizeof(buf) * world.size());
  RETURN_IF_ERROR(world.AllGather(buf, sizeof(buf), all.data()));
  for (int r = 0; r < world.size(); ++r)
    if (all[r * sizeof(buf)] != 0) return Status::Unavailable("rank " + std::to_string(r) + ": " + std::string(&all[r * sizeof(buf)]));
  return Status::Ok();
}

Status CheckLayout(const EpRunOptions& o, int n, const std::vector<int>& node_of, const ModelConfig& c) {
  if (o.tp < 1 || n % o.tp != 0)
    return Status::InvalidArgument("-np " + std::to_string(n) + " is not a multiple of --tp " + std::to_string(o.tp));
  if (c.num_attention_heads % o.tp != 0)
    return Status::InvalidArgument("--tp " + std::to_string(o.tp) + " does not divide the model's " +
                                   std::to_string(c.num_attention_heads) + " attention heads");
  if (n > c.n_routed_experts)
    return Status::InvalidArgument(std::to_string(n) + " ranks but only " + std::to_string(c.n_routed_experts) +
                                   " routed experts: every rank must hold at least one");
  for (int g = 0; g < n / o.tp; ++g)
    for (int r = g * o.tp; r < (g + 1) * o.tp; ++r)
      if (node_of[r] != node_of[g * o.tp])
        return Status::InvalidArgument("DP group " + std::to_string(g) + " (ranks " + std::to_string(g * o.tp) + "-" +
                                       std::to_string((g + 1) * o.tp - 1) + ") would span machines " +
                                       std::to_string(node_of[g * o.tp]) + " and " + std::to_string(node_of[r]) +
                                       "; an engine instance never spans machines");
  return Status::Ok();
}

std::string Serialize(const std::vector<int>& idx, const GenerateResult& res) {
  std::string s;
  auto put = [&s](const void* p, size_t n) { s.append(static_cast<const char*>(p), n); };
  int64_t count = static_cast<int64_t>(idx.size());
  put(&count, 8);
  for (size_t i = 0; i < idx.size(); ++i) {
    const RequestResult& r = res.requests[i];
    int64_t head[7] = {idx[i], static_cast<int64_t>(r.tokens.size()), static_cast<int64_t>(r.finish),
                       r.cached_prompt_tokens, static_cast<int64_t>(r.error.size()), static_cast<int64_t>(r.logits.size()),
                       r.first_token_step};
    put(head, sizeof(head));
    put(r.tokens.data(), r.tokens.size() * 4);
    put(r.error.data(), r.error.size());
    put(r.logits.data(), r.logits.size() * 4);
  }
  double times[2] = {res.prefill_seconds, res.decode_seconds};
  int64_t counts[2] = {res.prefill_tokens, res.decode_tokens};
  put(times, 16);
  put(counts, 16);
  return s;
}

}  // namespace

EpError RunEpGenerate(comm::MpiWorld& mpi, const EpRunOptions& o, EpRunResult* out) {
  comm::Communicator& world = mpi.world();
  const int n = world.size(), me = world.rank();
  // Machines.
  std::vector<int> node_of(n);
  if (o.ranks_per_node > 0) {
    if (n % o.ranks_per_node != 0)
      return {Status::InvalidArgument("--ranks-per-node " + std::to_string(o.ranks_per_node) + " does not divide -np " + std::to_string(n)), true};
    for (int r = 0; r < n; ++r) node_of[r] = r / o.ranks_per_node;
  } else {
    int mine = mpi.node_index();
    if (Status st = world.AllGather(&mine, sizeof(int), node_of.data()); !st.ok()) return {st, false};
  }
  const int num_nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  const int rpn = n / num_nodes;
  for (int r = 0; r < n; ++r)
    if (node_of[r] != r / rpn)
      return {Status::InvalidArgument("machines hold unequal or non-consecutive ranks; use --ranks-per-node or a hostfile with equal slots"), true};

  // Config (every rank reads it; a bad file fails everywhere alike).
  ModelConfig config;
  Status st;
  {
    auto text = ReadTextFile(o.model_dir + "/config.json");
    if (!text.ok()) {
      st = text.status();
    } else {
      auto c = ModelConfig::Parse(*text, o.model_dir + "/config.json");
      if (c.ok()) config = *c;
      else st = c.status();
    }
  }
  if (Status agreed = Agree(world, st); !agreed.ok()) return {agreed, true};
  if (Status s = CheckLayout(o, n, node_of, config); !s.ok()) return {s, true};

  placement::Placement plan = ContiguousPlacement(config, n, rpn);
  if (!o.placement_path.empty()) {
    auto loaded = placement::LoadPlacement(o.placement_path);
    if (!loaded.ok()) return {loaded.status(), true};
    plan = *loaded;
    if (plan.topology.num_ranks() != n || plan.topology.ranks_per_node != rpn)
      return {Status::InvalidArgument(o.placement_path + ": placement is for " + std::to_string(plan.topology.num_nodes) + " machines x " +
                                      std::to_string(plan.topology.ranks_per_node) + " ranks, the job has " +
                                      std::to_string(num_nodes) + " x " + std::to_string(rpn)), true};
    if (plan.model.num_experts != config.n_routed_experts)
      return {Status::InvalidArgument(o.placement_path + ": placement has " + std::to_string(plan.model.num_experts) +
                                      " experts per layer, the model " + std::to_string(config.n_routed_experts)), true};
    for (int l = 0; l < config.num_hidden_layers; ++l)
      if (config.IsMoeLayer(l) && plan.LayerIndex(l) < 0)
        return {Status::InvalidArgument(o.placement_path + ": no placement for MoE layer " + std::to_string(l)), true};
  }
  auto router = placement::Router::Create(plan, plan.routing);
  if (!router.ok()) return {router.status(), true};

  // Load only this rank's experts; agree that every rank loaded.
  std::vector<std::set<int>> mine(config.num_hidden_layers);
  for (int l = 0; l < config.num_hidden_layers; ++l)
    if (config.IsMoeLayer(l))
      for (int e : plan.layers[plan.LayerIndex(l)].slots[me]) mine[l].insert(e);
  LoadOptions lo{.want_expert = [&mine](int l, int e) { return l < static_cast<int>(mine.size()) && mine[l].count(e) > 0; },
                 .memory = o.weights};
  auto lm = LoadModel(o.model_dir, lo);
  if (me == o.fail_load_rank) lm = Status::IoError(o.model_dir + ": injected load failure (--fault-fail-load-rank)");
  if (Status agreed = Agree(world, lm.ok() ? Status::Ok() : lm.status()); !agreed.ok()) return {agreed, true};

  // Groups and the engine of this rank.
  const int dp = n / o.tp, group = me / o.tp;
  auto group_comm = world.Split(group, me);
  if (!group_comm.ok()) return {group_comm.status(), false};
  ThreadPool pool(o.threads > 0 ? o.threads : ThreadPool::DefaultThreads(mpi.local_ranks()));
  comm::Dispatcher dispatcher(world, node_of, {.hidden = config.hidden_size, .top_k = config.num_experts_per_tok, .mode = o.a2a});
  EpExperts experts(dispatcher, plan, *router, *(*lm)->weights, pool, config.num_hidden_layers, config.n_routed_experts);
  Model model((*lm)->config, *(*lm)->weights, pool);
  model.SetExperts(&experts);
  model.SetTensorParallel({.rank = me % o.tp, .size = o.tp, .group = group_comm->get()});

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
    eng.num_blocks = o.kv_memory_bytes > 0 ? KvMemoryBlocks(config, eng.kv_dtype, eng.block_size, o.kv_memory_bytes)
                                           : BlocksForAll(group_requests, eng.block_size);
    if (eng.num_blocks < 1)
      return {Status::InvalidArgument("--kv-memory " + std::to_string(o.kv_memory_bytes) + " bytes holds no cache block"), true};
  }
  eng.keep_logits = o.keep_logits;
  eng.default_stop_ids = config.eos_token_ids;
  Engine engine(model, eng);
  GenerateOptions gen{.keep_logits = o.keep_logits,
                      .on_step = [&](int step) {
                        if (me == o.kill_rank && step == o.kill_step) std::raise(SIGKILL);
                      },
                      .world = &world,
                      .group = group_comm->get()};
  auto res = RunRequests(engine, requests, gen);
  if (!res.ok()) return {res.status().WithContext("rank " + std::to_string(me)), false};

  // Results to rank 0: one blob per DP group (its TP rank 0), empty from the others.
  std::vector<std::string> blobs;
  Status gs = world.GatherBlobs(leader ? Serialize(request_idx, *res) : std::string(), 0, &blobs);
  if (!gs.ok()) return {gs, false};
  std::vector<std::string> stat_blobs;
  gs = world.GatherBlobs(SerializeRankStats(model.times(), experts, res->prefill_seconds + res->decode_seconds), 0,
                         &stat_blobs);
  if (!gs.ok()) return {gs, false};
  if (me != 0) return {Status::Ok(), false};

  out->vocab = config.vocab_size;
  out->num_ranks = n, out->tp = o.tp, out->dp = dp, out->num_nodes = num_nodes;
  out->requests.assign(o.requests.size(), {});
  out->group_batch.assign(dp, 0);
  out->cache_blocks = eng.num_blocks;
  out->block_size = eng.block_size;
  for (int r = 0; r < n; ++r) {
    const std::string& b = blobs[r];
    if (b.empty()) continue;
    const char* p = b.data();
    auto get = [&p](void* dst, size_t len) { std::memcpy(dst, p, len); p += len; };
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
    int64_t counts[2];
    get(times, 16);
    get(counts, 16);
    out->prefill_seconds = std::max(out->prefill_seconds, times[0]);
    out->decode_seconds = std::max(out->decode_seconds, times[1]);
    out->prefill_tokens += counts[0];
    out->decode_tokens += counts[1];
  }
  out->stats_table = FormatStats(stat_blobs, node_of, config);
  return {Status::Ok(), false};
}

}  // namespace epserve
