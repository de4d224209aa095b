#include "runtime/ep_replica.h"

#include <algorithm>
#include <set>

#include "placement/place.h"
#include "placement/placement_io.h"

namespace epserve {

namespace {

// Every rank contributes its status; all return the first failure, naming its rank.
Status Agree(comm::Communicator& world, const Status& mine) {
  char buf[512] = {};
  if (!mine.ok()) std::snprintf(buf, sizeof(buf), "%s", mine.message().c_str());
  std::vector<char> all(sizeof(buf) * world.size());
  RETURN_IF_ERROR(world.AllGather(buf, sizeof(buf), all.data()));
  for (int r = 0; r < world.size(); ++r)
    if (all[r * sizeof(buf)] != 0)
      return Status::Unavailable(std::string(&all[r * sizeof(buf)]))
          .WithContextOnce("rank " + std::to_string(r));
  return Status::Ok();
}

// split_heads: the attention heads TP splits (0: attention is replicated, nothing to divide).
Status CheckLayout(const EpReplicaOptions& o, int n, const std::vector<int>& node_of,
                   int split_heads, int num_experts) {
  if (o.tp < 1 || n % o.tp != 0)
    return Status::InvalidArgument("-np " + std::to_string(n) + " is not a multiple of --tp " +
                                   std::to_string(o.tp));
  if (split_heads > 0 && split_heads % o.tp != 0)
    return Status::InvalidArgument("--tp " + std::to_string(o.tp) +
                                   " does not divide the model's " + std::to_string(split_heads) +
                                   " attention heads");
  if (n > num_experts)
    return Status::InvalidArgument(std::to_string(n) + " ranks but only " +
                                   std::to_string(num_experts) +
                                   " routed experts: every rank must hold at least one");
  for (int g = 0; g < n / o.tp; ++g)
    for (int r = g * o.tp; r < (g + 1) * o.tp; ++r)
      if (node_of[r] != node_of[g * o.tp])
        return Status::InvalidArgument(
            "DP group " + std::to_string(g) + " (ranks " + std::to_string(g * o.tp) + "-" +
            std::to_string((g + 1) * o.tp - 1) + ") would span machines " +
            std::to_string(node_of[g * o.tp]) + " and " + std::to_string(node_of[r]) +
            "; an engine instance never spans machines");
  return Status::Ok();
}

// A placement file's topology and expert count against the job's and the model's.
Status CheckPlacementShape(const std::string& path, const placement::Placement& plan, int n,
                           int num_nodes, int rpn, int num_experts) {
  if (plan.topology.num_ranks() != n || plan.topology.ranks_per_node != rpn)
    return Status::InvalidArgument(
        path + ": placement is for " + std::to_string(plan.topology.num_nodes) + " machines x " +
        std::to_string(plan.topology.ranks_per_node) + " ranks, the job has " +
        std::to_string(num_nodes) + " x " + std::to_string(rpn));
  if (plan.model.num_experts != num_experts)
    return Status::InvalidArgument(path + ": placement has " +
                                   std::to_string(plan.model.num_experts) +
                                   " experts per layer, the model " + std::to_string(num_experts));
  return Status::Ok();
}

struct Machines {
  std::vector<int> node_of;
  int num_nodes = 1, rpn = 1;
};

// DeepSeek-V4: every layer is a MoE layer; all of them are placed and exchanged.
EpError BuildV4Replica(comm::MpiWorld& mpi, const EpReplicaOptions& o, const Machines& m,
                       std::unique_ptr<EpReplica>* out) {
  comm::Communicator& world = mpi.world();
  const int n = world.size(), me = world.rank();
  const std::string what = o.model_dir + " is a DeepSeek-V4 checkpoint: ";
  if (o.mtp)
    return {Status::InvalidArgument(what + "--mtp on: its MTP module is not run yet"), true};
  if (o.requant != LoadOptions::Requant::kNone)
    return {Status::InvalidArgument(what + "--requant is not implemented for V4"), true};
  // Every rank maps the whole checkpoint: experts are FP4/FP8 views of the file mapping, so an
  // expert this rank does not serve is never read (selective loading would save no memory).
  StatusOr<std::unique_ptr<v4::V4Weights>> weights = v4::V4Weights::Load(o.model_dir);
  if (Status agreed = Agree(world, weights.ok() ? Status::Ok() : weights.status()); !agreed.ok())
    return {agreed, true};
  const v4::V4Config& c = (*weights)->config();
  if (Status s = CheckLayout(o, n, m.node_of, /*split_heads=*/0, c.num_experts); !s.ok())
    return {s, true};
  std::vector<int> layers(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) layers[l] = l;
  const placement::ModelShape shape{.name = "deepseek_v4",
                                    .num_experts = c.num_experts,
                                    .top_k = c.experts_per_token,
                                    .hidden_size = static_cast<int>(c.hidden_size),
                                    .moe_intermediate_size = static_cast<int>(c.moe_inter),
                                    .num_hidden_layers = c.num_layers,
                                    .num_expert_groups = 1};
  placement::Placement plan = ContiguousPlacement(shape, layers, n, m.rpn);
  if (!o.placement_path.empty()) {
    auto loaded = placement::LoadPlacement(o.placement_path);
    if (!loaded.ok()) return {loaded.status(), true};
    plan = *loaded;
    if (Status s =
            CheckPlacementShape(o.placement_path, plan, n, m.num_nodes, m.rpn, c.num_experts);
        !s.ok())
      return {s, true};
    for (int l : layers)
      if (plan.LayerIndex(l) < 0)
        return {Status::InvalidArgument(o.placement_path + ": no placement for MoE layer " +
                                        std::to_string(l)),
                true};
  }
  auto router = placement::Router::Create(plan, plan.routing);
  if (!router.ok()) return {router.status(), true};
  Status load = Status::Ok();
  if (me == o.fail_load_rank)
    load = Status::IoError(o.model_dir + ": injected load failure (--fault-fail-load-rank)");
  if (Status agreed = Agree(world, load); !agreed.ok()) return {agreed, true};

  const int group = me / o.tp;
  auto group_comm = world.Split(group, me);
  if (!group_comm.ok()) return {group_comm.status(), false};
  auto r = std::make_unique<EpReplica>();
  r->family = ModelFamily::kDeepSeekV4;
  r->node_of = m.node_of;
  r->num_ranks = n, r->rank = me, r->num_nodes = m.num_nodes, r->ranks_per_node = m.rpn;
  r->tp = o.tp, r->dp = n / o.tp, r->group = group;
  r->plan = std::make_unique<placement::Placement>(std::move(plan));
  r->router = std::make_unique<placement::Router>(std::move(*router));
  r->v4_weights = std::move(*weights);
  r->group_comm = std::move(*group_comm);
  r->pool = std::make_unique<ThreadPool>(
      o.threads > 0 ? o.threads : ThreadPool::DefaultThreads(mpi.local_ranks()));
  r->dispatcher = std::make_unique<comm::Dispatcher>(
      world, m.node_of,
      comm::DispatchOptions{.hidden = static_cast<int>(c.hidden_size),
                            .top_k = c.experts_per_token,
                            .mode = o.a2a,
                            .ue8m0_scales = c.ue8m0_scales});
  r->experts = std::make_unique<EpExperts>(*r->dispatcher, *r->plan, *r->router, *r->v4_weights,
                                           *r->pool, c.num_layers, c.num_experts);
  r->v4_model = std::make_unique<v4::V4Model>(*r->v4_weights, *r->pool);
  r->v4_model->SetExperts(r->experts.get());
  r->v4_model->SetTensorParallel({.rank = me % o.tp, .size = o.tp, .group = r->group_comm.get()});
  *out = std::move(r);
  return {Status::Ok(), false};
}

}  // namespace

EpError BuildEpReplica(comm::MpiWorld& mpi, const EpReplicaOptions& o,
                       std::unique_ptr<EpReplica>* out) {
  auto r = std::make_unique<EpReplica>();
  comm::Communicator& world = mpi.world();
  const int n = world.size(), me = world.rank();
  // Machines.
  std::vector<int> node_of(n);
  if (o.ranks_per_node > 0) {
    if (n % o.ranks_per_node != 0)
      return {Status::InvalidArgument("--ranks-per-node " + std::to_string(o.ranks_per_node) +
                                      " does not divide -np " + std::to_string(n)),
              true};
    for (int r = 0; r < n; ++r) node_of[r] = r / o.ranks_per_node;
  } else {
    int mine = mpi.node_index();
    if (Status st = world.AllGather(&mine, sizeof(int), node_of.data()); !st.ok())
      return {st, false};
  }
  const int num_nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  const int rpn = n / num_nodes;
  for (int r = 0; r < n; ++r)
    if (node_of[r] != r / rpn)
      return {Status::InvalidArgument("machines hold unequal or non-consecutive ranks; use "
                                      "--ranks-per-node or a hostfile with equal slots"),
              true};

  // The family (a missing or bad config.json is reported below as before).
  if (StatusOr<ModelFamily> family = DetectModelFamily(o.model_dir);
      family.ok() && *family == ModelFamily::kDeepSeekV4)
    return BuildV4Replica(mpi, o, {.node_of = node_of, .num_nodes = num_nodes, .rpn = rpn}, out);

  // Config (every rank reads it; a bad file fails everywhere alike).
  ModelConfig config;
  Status st;
  {
    auto text = ReadTextFile(o.model_dir + "/config.json");
    if (!text.ok()) {
      st = text.status();
    } else {
      auto c = ModelConfig::Parse(*text, o.model_dir + "/config.json");
      if (c.ok())
        config = *c;
      else
        st = c.status();
    }
  }
  if (Status agreed = Agree(world, st); !agreed.ok()) return {agreed, true};
  if (Status s = CheckLayout(o, n, node_of, config.num_attention_heads, config.n_routed_experts);
      !s.ok())
    return {s, true};

  placement::Placement plan = ContiguousPlacement(config, n, rpn);
  if (!o.placement_path.empty()) {
    auto loaded = placement::LoadPlacement(o.placement_path);
    if (!loaded.ok()) return {loaded.status(), true};
    plan = *loaded;
    if (Status s =
            CheckPlacementShape(o.placement_path, plan, n, num_nodes, rpn, config.n_routed_experts);
        !s.ok())
      return {s, true};
    for (int l = 0; l < config.num_hidden_layers; ++l)
      if (config.IsMoeLayer(l) && plan.LayerIndex(l) < 0)
        return {Status::InvalidArgument(o.placement_path + ": no placement for MoE layer " +
                                        std::to_string(l)),
                true};
  }
  // The MTP module's MoE layer (id num_hidden_layers + i) is placed like any MoE layer.
  const int mtp_layers = o.mtp ? config.num_nextn_predict_layers : 0;
  const int layers = config.num_hidden_layers + mtp_layers;
  for (int l = config.num_hidden_layers; l < layers; ++l)
    if (config.IsMoeLayer(l) && plan.LayerIndex(l) < 0)
      plan.layers.push_back(placement::PlaceContiguousLayer(l, config.n_routed_experts, n));
  auto router = placement::Router::Create(plan, plan.routing);
  if (!router.ok()) return {router.status(), true};

  // Load only this rank's experts; agree that every rank loaded.
  std::vector<std::set<int>> mine(layers);
  for (int l = 0; l < layers; ++l)
    if (config.IsMoeLayer(l))
      for (int e : plan.layers[plan.LayerIndex(l)].slots[me]) mine[l].insert(e);
  LoadOptions lo{.want_expert =
                     [&mine](int l, int e) {
                       return l < static_cast<int>(mine.size()) && mine[l].count(e) > 0;
                     },
                 .memory = o.weights,
                 .requant = o.requant,
                 .mtp = o.mtp ? LoadOptions::Mtp::kLoad : LoadOptions::Mtp::kSkip};
  auto lm = LoadModel(o.model_dir, lo);
  if (me == o.fail_load_rank)
    lm = Status::IoError(o.model_dir + ": injected load failure (--fault-fail-load-rank)");
  if (Status agreed = Agree(world, lm.ok() ? Status::Ok() : lm.status()); !agreed.ok())
    return {agreed, true};

  // Groups and the model of this rank.
  const int dp = n / o.tp, group = me / o.tp;
  auto group_comm = world.Split(group, me);
  if (!group_comm.ok()) return {group_comm.status(), false};
  r->config = config;
  r->node_of = node_of;
  r->num_ranks = n, r->rank = me, r->num_nodes = num_nodes, r->ranks_per_node = rpn;
  r->tp = o.tp, r->dp = dp, r->group = group;
  r->plan = std::make_unique<placement::Placement>(std::move(plan));
  r->router = std::make_unique<placement::Router>(std::move(*router));
  r->loaded = std::move(*lm);
  r->group_comm = std::move(*group_comm);
  r->pool = std::make_unique<ThreadPool>(
      o.threads > 0 ? o.threads : ThreadPool::DefaultThreads(mpi.local_ranks()));
  r->dispatcher = std::make_unique<comm::Dispatcher>(
      world, node_of,
      comm::DispatchOptions{.hidden = config.hidden_size,
                            .top_k = config.num_experts_per_tok,
                            .mode = o.a2a,
                            .ue8m0_scales = config.ue8m0_scales});
  r->expert_table = std::make_unique<ModelExpertTable>(*r->loaded->weights);
  r->experts = std::make_unique<EpExperts>(*r->dispatcher, *r->plan, *r->router, *r->expert_table,
                                           *r->pool, layers, config.n_routed_experts);
  r->model = std::make_unique<Model>(r->loaded->config, *r->loaded->weights, *r->pool);
  r->model->SetExperts(r->experts.get());
  r->model->SetTensorParallel({.rank = me % o.tp, .size = o.tp, .group = r->group_comm.get()});
  *out = std::move(r);
  return {Status::Ok(), false};
}

}  // namespace epserve
