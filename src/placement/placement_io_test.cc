#include "placement/placement_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "placement/place.h"
#include "placement/synthetic.h"

namespace epserve::placement {
namespace {

namespace fs = std::filesystem;

std::string TempFile(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "placement_io_test";
  fs::create_directories(dir);
  return (dir / name).string();
}

Placement GracePlacement() {
  const ModelShape shape{.name = "s",
                         .num_experts = 16,
                         .top_k = 2,
                         .hidden_size = 64,
                         .moe_intermediate_size = 32,
                         .num_hidden_layers = 4,
                         .num_expert_groups = 1};
  const Trace trace = MakeSyntheticTrace(SyntheticTraceOptions{
      .shape = shape, .num_layers = 2, .num_tokens = 500, .num_clusters = 4, .seed = 9});
  PlaceOptions options;
  options.topology = Topology{2, 2};
  StatusOr<PlaceResult> r = Place(trace, options);
  CHECK(r.ok()) << r.status().message();
  return r->placement;
}

TEST(PlacementIoTest, RoundTrips) {
  const Placement p = GracePlacement();
  ASSERT_GT(p.NumExtraCopies(), 0);
  const std::string path = TempFile("grace.json");
  ASSERT_TRUE(SavePlacement(p, path).ok());
  StatusOr<Placement> back = LoadPlacement(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->strategy, "grace");
  EXPECT_EQ(back->routing, RoutingPolicy::kTopology);
  EXPECT_EQ(back->topology.num_nodes, 2);
  EXPECT_EQ(back->model.num_hidden_layers, 4);
  ASSERT_EQ(back->layers.size(), p.layers.size());
  for (size_t l = 0; l < p.layers.size(); ++l) {
    EXPECT_EQ(back->layers[l].layer_id, p.layers[l].layer_id);
    EXPECT_EQ(back->layers[l].slots, p.layers[l].slots);
    for (size_t e = 0; e < p.layers[l].copies.size(); ++e) {
      ASSERT_EQ(back->layers[l].copies[e].size(), p.layers[l].copies[e].size());
      for (size_t c = 0; c < p.layers[l].copies[e].size(); ++c) {
        EXPECT_EQ(back->layers[l].copies[e][c].rank, p.layers[l].copies[e][c].rank);
        EXPECT_DOUBLE_EQ(back->layers[l].copies[e][c].weight, p.layers[l].copies[e][c].weight);
      }
    }
  }
}

TEST(PlacementIoTest, RejectsBrokenFilesNamingThem) {
  const Placement p = GracePlacement();
  const std::string good = PlacementToJson(p);
  const std::string path = TempFile("bad.json");
  auto load_text = [&](const std::string& text) {
    std::ofstream(path) << text;
    return LoadPlacement(path);
  };
  for (const std::string& text :
       {std::string("not json"), std::string("{\"format\":\"other\",\"version\":1}"),
        // Found with fuzz/placement_fuzz: a format or version of another type threw.
        std::string("{\"format\":[\"epserve-placement\"],\"version\":1}"),
        std::string("{\"format\":\"epserve-placement\",\"version\":\"1\"}"),
        good.substr(0, good.size() / 2)}) {
    StatusOr<Placement> r = load_text(text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind(path, 0), 0u) << r.status().message();
  }
  // A copy on a rank that does not hold the expert.
  nlohmann::json doc = nlohmann::json::parse(good);
  const int e = doc["layers"][0]["ranks"][0][0].get<int>();
  int stranger = -1;
  for (int r = 3; r >= 0 && stranger < 0; --r) {
    bool holds = false;
    for (const auto& slot : doc["layers"][0]["ranks"][r]) holds |= slot.get<int>() == e;
    if (!holds) stranger = r;
  }
  ASSERT_GE(stranger, 0);
  doc["layers"][0]["copies"][e].push_back(nlohmann::json::array({stranger, 1.0}));
  StatusOr<Placement> r = load_text(doc.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("which does not hold it"), std::string::npos)
      << r.status().message();
  // Found with fuzz/placement_fuzz: a float where an int belongs (get<int>() of 1e50 is
  // undefined behaviour).
  nlohmann::json floats = nlohmann::json::parse(good);
  floats["layers"][0]["ranks"][1][0] = 1e50;
  StatusOr<Placement> float_rank = load_text(floats.dump());
  ASSERT_FALSE(float_rank.ok());
  EXPECT_EQ(float_rank.status().message(),
            path + ": layers[0].ranks[1][0]: expected an integer in int's range, got 1e+50");
  EXPECT_FALSE(LoadPlacement(TempFile("missing.json")).ok());
}

TEST(PlacementIoTest, SglangMapPadsRanksWithTheirOwnHotExperts) {
  Placement p;
  p.strategy = "grace";
  p.topology = Topology{1, 2};
  p.model = ModelShape{.name = "t",
                       .num_experts = 4,
                       .top_k = 2,
                       .hidden_size = 8,
                       .moe_intermediate_size = 8,
                       .num_hidden_layers = 3,
                       .num_expert_groups = 1};
  p.layers.push_back(LayerFromSlots(2, 4, {{0, 1, 2}, {3}}));
  const std::vector<std::vector<int>> map = SglangPhysicalToLogical(p, {{1, 1, 1, 5}});
  ASSERT_EQ(map.size(), 3u);  // layers 0..2, dense ones with the trivial map
  EXPECT_EQ(map[0], (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(map[2], (std::vector<int>{0, 1, 2, 3, 3, 3}));
  const std::string path = TempFile("sglang.json");
  ASSERT_TRUE(SaveSglangPlacement(p, {{1, 1, 1, 5}}, path).ok());
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["physical_to_logical_map"][2][4].get<int>(), 3);
}

}  // namespace
}  // namespace epserve::placement
