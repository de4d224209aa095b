#include "placement/placement_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/json.h"
#include "base/output_file.h"
#include "placement/json_int.h"

namespace epserve::placement {
namespace {

using Json = nlohmann::json;

}  // namespace

std::string PlacementToJson(const Placement& placement) {
  const ModelShape& m = placement.model;
  Json layers = Json::array();
  for (const LayerPlacement& layer : placement.layers) {
    Json copies = Json::array();
    for (const auto& expert_copies : layer.copies) {
      Json list = Json::array();
      for (const ExpertCopy& c : expert_copies) list.push_back(Json::array({c.rank, c.weight}));
      copies.push_back(std::move(list));
    }
    layers.push_back(Json{{"layer", layer.layer_id}, {"ranks", layer.slots}, {"copies", copies}});
  }
  Json doc = {{"format", kPlacementFormat},
              {"version", kPlacementVersion},
              {"strategy", placement.strategy},
              {"routing", std::string(RoutingPolicyName(placement.routing))},
              {"topology",
               {{"num_nodes", placement.topology.num_nodes},
                {"ranks_per_node", placement.topology.ranks_per_node}}},
              {"model",
               {{"name", m.name},
                {"num_experts", m.num_experts},
                {"top_k", m.top_k},
                {"hidden_size", m.hidden_size},
                {"moe_intermediate_size", m.moe_intermediate_size},
                {"num_hidden_layers", m.num_hidden_layers},
                {"num_expert_groups", m.num_expert_groups}}},
              {"layers", layers}};
  // One layer per line keeps the file diffable without blowing it up to one number per line.
  std::ostringstream out;
  out << "{\n";
  bool first = true;
  for (const auto& key : {"format", "version", "strategy", "routing", "topology", "model"}) {
    out << (first ? "" : ",\n") << "  " << Json(key).dump() << ": " << doc[key].dump();
    first = false;
  }
  out << ",\n  \"layers\": [\n";
  for (size_t i = 0; i < layers.size(); ++i) {
    out << "    " << layers[i].dump() << (i + 1 < layers.size() ? ",\n" : "\n");
  }
  out << "  ]\n}\n";
  return out.str();
}

StatusOr<Placement> PlacementFromJson(const std::string& text, const std::string& source) {
  ASSIGN_OR_RETURN(Json doc, ParseJson(text, source));
  if (!doc.is_object()) {
    return Status::DataLoss(source + ": expected a JSON object, got " + doc.type_name());
  }
  // Compared as JSON values: a "format" or "version" of another type is a mismatch, not a throw.
  auto format = doc.find("format");
  if (format == doc.end() || *format != kPlacementFormat) {
    return Status::DataLoss(source + ": \"format\" is not \"" + kPlacementFormat + "\"");
  }
  auto version = doc.find("version");
  if (version == doc.end() || *version != kPlacementVersion) {
    return Status::DataLoss(source + ": unsupported version (this build reads " +
                            std::to_string(kPlacementVersion) + ")");
  }
  Placement p;
  try {
    p.strategy = doc.value("strategy", std::string());
    StatusOr<RoutingPolicy> routing = ParseRoutingPolicy(doc.value("routing", std::string("topo")));
    if (!routing.ok()) return routing.status().WithContext(source);
    p.routing = *routing;
    const std::string at = source + ": ";
    ASSIGN_OR_RETURN(const Json* topo, JsonField(doc, "topology", source));
    ASSIGN_OR_RETURN(const Json* num_nodes, JsonField(*topo, "num_nodes", at + "topology"));
    ASSIGN_OR_RETURN(p.topology.num_nodes, JsonInt(*num_nodes, at + "topology.num_nodes"));
    ASSIGN_OR_RETURN(const Json* per_node, JsonField(*topo, "ranks_per_node", at + "topology"));
    ASSIGN_OR_RETURN(p.topology.ranks_per_node, JsonInt(*per_node, at + "topology.ranks_per_node"));
    ASSIGN_OR_RETURN(const Json* model_field, JsonField(doc, "model", source));
    const Json& model = *model_field;
    p.model.name = model.value("name", std::string());
    ASSIGN_OR_RETURN(const Json* num_experts, JsonField(model, "num_experts", at + "model"));
    ASSIGN_OR_RETURN(p.model.num_experts, JsonInt(*num_experts, at + "model.num_experts"));
    ASSIGN_OR_RETURN(const Json* top_k, JsonField(model, "top_k", at + "model"));
    ASSIGN_OR_RETURN(p.model.top_k, JsonInt(*top_k, at + "model.top_k"));
    ASSIGN_OR_RETURN(p.model.hidden_size, JsonIntOr(model, "hidden_size", 0, at + "model."));
    ASSIGN_OR_RETURN(p.model.moe_intermediate_size,
                     JsonIntOr(model, "moe_intermediate_size", 0, at + "model."));
    ASSIGN_OR_RETURN(p.model.num_hidden_layers,
                     JsonIntOr(model, "num_hidden_layers", 0, at + "model."));
    ASSIGN_OR_RETURN(p.model.num_expert_groups,
                     JsonIntOr(model, "num_expert_groups", 1, at + "model."));
    size_t layer_idx = 0;
    ASSIGN_OR_RETURN(const Json* layers, JsonField(doc, "layers", source));
    if (!layers->is_array()) return Status::DataLoss(at + "layers: expected an array");
    for (const Json& l : *layers) {
      const std::string where = at + "layers[" + std::to_string(layer_idx++) + "]";
      LayerPlacement layer;
      ASSIGN_OR_RETURN(const Json* layer_id, JsonField(l, "layer", where));
      ASSIGN_OR_RETURN(layer.layer_id, JsonInt(*layer_id, where + ".layer"));
      ASSIGN_OR_RETURN(const Json* ranks_field, JsonField(l, "ranks", where));
      const Json& ranks = *ranks_field;
      if (!ranks.is_array()) return Status::DataLoss(where + ".ranks: expected an array");
      for (size_t r = 0; r < ranks.size(); ++r) {
        ASSIGN_OR_RETURN(std::vector<int> slots,
                         JsonIntArray(ranks[r], where + ".ranks[" + std::to_string(r) + "]"));
        layer.slots.push_back(std::move(slots));
      }
      ASSIGN_OR_RETURN(const Json* all_copies, JsonField(l, "copies", where));
      if (!all_copies->is_array()) return Status::DataLoss(where + ".copies: expected an array");
      for (const Json& expert_copies : *all_copies) {
        std::vector<ExpertCopy> copies;
        for (const Json& c : expert_copies) {
          if (!c.is_array() || c.size() != 2) {
            return Status::DataLoss(source + ": layer " + std::to_string(layer.layer_id) +
                                    ": a copy must be [rank, weight]");
          }
          ASSIGN_OR_RETURN(int rank, JsonInt(c[0], where + ".copies: a copy's rank"));
          if (!c[1].is_number())
            return Status::DataLoss(where + ".copies: a copy's weight must be a number");
          copies.push_back(ExpertCopy{.rank = rank, .weight = c[1].get<double>()});
        }
        layer.copies.push_back(std::move(copies));
      }
      p.layers.push_back(std::move(layer));
    }
  } catch (const Json::exception& e) {  // a type the checks above did not foresee
    return Status::DataLoss(source + ": " + JsonExceptionText(e));
  }
  RETURN_IF_ERROR(ValidatePlacement(p).WithContext(source));
  return p;
}

Status SavePlacement(const Placement& placement, const std::string& path) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  return WriteFileAtomically(path, PlacementToJson(placement));
}

StatusOr<Placement> LoadPlacement(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return PlacementFromJson(text.str(), path);
}

std::vector<std::vector<int>> SglangPhysicalToLogical(
    const Placement& placement, const std::vector<std::vector<double>>& expert_load) {
  const int num_ranks = placement.topology.num_ranks();
  const int n = placement.model.num_experts;
  size_t slots_per_rank = 1;
  for (const auto& layer : placement.layers) {
    for (const auto& s : layer.slots) slots_per_rank = std::max(slots_per_rank, s.size());
  }
  int num_rows = placement.model.num_hidden_layers;
  for (const auto& layer : placement.layers) num_rows = std::max(num_rows, layer.layer_id + 1);
  const size_t num_physical = slots_per_rank * num_ranks;
  std::vector<std::vector<int>> map(num_rows, std::vector<int>(num_physical));
  for (auto& row : map) {
    for (size_t p = 0; p < num_physical; ++p) row[p] = static_cast<int>(p % n);
  }
  for (size_t li = 0; li < placement.layers.size(); ++li) {
    const LayerPlacement& layer = placement.layers[li];
    std::vector<int>& row = map[layer.layer_id];
    for (int r = 0; r < num_ranks; ++r) {
      std::vector<int> slots = layer.slots[r];
      std::vector<int> padding = slots;
      if (li < expert_load.size() && !expert_load[li].empty()) {
        std::stable_sort(padding.begin(), padding.end(),
                         [&](int a, int b) { return expert_load[li][a] > expert_load[li][b]; });
      }
      if (padding.empty()) padding.push_back(r % n);
      for (size_t i = 0; slots.size() < slots_per_rank; ++i) {
        slots.push_back(padding[i % padding.size()]);
      }
      std::copy(slots.begin(), slots.end(), row.begin() + static_cast<size_t>(r) * slots_per_rank);
    }
  }
  return map;
}

Status SaveSglangPlacement(const Placement& placement,
                           const std::vector<std::vector<double>>& expert_load,
                           const std::string& path) {
  RETURN_IF_ERROR(ValidatePlacement(placement));
  // The map's size, bounded before SglangPhysicalToLogical allocates it.
  int64_t slots_per_rank = 1, num_rows = placement.model.num_hidden_layers;
  for (const auto& layer : placement.layers) {
    for (const auto& s : layer.slots) slots_per_rank = std::max<int64_t>(slots_per_rank, s.size());
    num_rows = std::max<int64_t>(num_rows, layer.layer_id + 1);
  }
  const int64_t entries = num_rows * slots_per_rank * placement.topology.num_ranks();
  if (entries > kMaxSglangMapEntries) {
    return Status::InvalidArgument(
        path + ": an SGLang map of " + std::to_string(num_rows) + " layers x " +
        std::to_string(slots_per_rank * placement.topology.num_ranks()) +
        " slots exceeds the limit of " + std::to_string(kMaxSglangMapEntries) +
        " entries (model.num_hidden_layers " + std::to_string(placement.model.num_hidden_layers) +
        ")");
  }
  Json doc = {{"physical_to_logical_map", SglangPhysicalToLogical(placement, expert_load)}};
  return WriteFileAtomically(path, doc.dump() + "\n");
}

}  // namespace epserve::placement
