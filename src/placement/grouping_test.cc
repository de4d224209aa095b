#include "placement/grouping.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace epserve::placement {
namespace {

// Symmetric n x n matrix from a list of (i, j, value) edges.
std::vector<double> Edges(int n, const std::vector<std::tuple<int, int, double>>& edges) {
  std::vector<double> a(static_cast<size_t>(n) * n, 0.0);
  for (const auto& [i, j, v] : edges) {
    a[i * n + j] = v;
    a[j * n + i] = v;
  }
  return a;
}

TEST(GroupingTest, BoundsFollowTheFormula) {
  SizeBounds b = ControlledBounds(64, 8, 0.0);  // E = 8, delta = max(1, 0) = 1
  EXPECT_EQ(b.min_size, 7);
  EXPECT_EQ(b.max_size, 9);
  b = ControlledBounds(64, 8, 0.25);  // delta = round(2) = 2
  EXPECT_EQ(b.min_size, 6);
  EXPECT_EQ(b.max_size, 10);
  b = ControlledBounds(50, 4, 0.0);  // E = 12.5, delta = 1: [11.5, 13.5]
  EXPECT_EQ(b.min_size, 12);
  EXPECT_EQ(b.max_size, 13);
  b = ControlledBounds(16, 4, 1.0);  // delta = 4 would allow 0: every group keeps one
  EXPECT_EQ(b.min_size, 1);
  EXPECT_EQ(b.max_size, 8);
  b = NonUniformBounds(64, 2, 4);
  EXPECT_EQ(b.min_size, 4);
  EXPECT_EQ(b.max_size, 60);
}

// Clique {0,1,2,3}; 4 leans on the clique; 5 barely touches it and loves 6 and 7.
std::vector<double> CliqueAndStragglers() {
  std::vector<std::tuple<int, int, double>> e;
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) e.emplace_back(i, j, 10);
  }
  e.emplace_back(4, 0, 2);
  e.emplace_back(4, 1, 2);
  e.emplace_back(5, 0, 1);
  e.emplace_back(5, 6, 5);
  e.emplace_back(5, 7, 5);
  e.emplace_back(6, 7, 5);
  return Edges(8, e);
}

TEST(GroupingTest, OversizedGroupReleasesItsLeastAffineMember) {
  const std::vector<double> a = CliqueAndStragglers();
  StatusOr<Groups> g = ControlledGrouping(a, 8, Groups{{0, 1, 2, 3, 4, 5}, {6, 7}},
                                          SizeBounds{.min_size = 3, .max_size = 5});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(*g, (Groups{{0, 1, 2, 3, 4}, {5, 6, 7}}));
}

TEST(GroupingTest, UndersizedGroupTakesTheCheapestMember) {
  const std::vector<double> a = CliqueAndStragglers();
  // {6, 7} must grow to 3: 5 is the member whose move costs least (it gains 10, loses 1).
  StatusOr<Groups> g = ControlledGrouping(a, 8, Groups{{0, 1, 2, 3, 4, 5}, {6, 7}},
                                          SizeBounds{.min_size = 3, .max_size = 6});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, (Groups{{0, 1, 2, 3, 4}, {5, 6, 7}}));
  // Three groups of 8 in [2, 3]: the clique must give up one member.
  StatusOr<Groups> three = ControlledGrouping(a, 8, Groups{{0, 1, 2, 3, 4}, {5, 6, 7}, {}},
                                              SizeBounds{.min_size = 2, .max_size = 3});
  ASSERT_TRUE(three.ok());
  for (const auto& group : *three) {
    EXPECT_GE(group.size(), 2u);
    EXPECT_LE(group.size(), 3u);
  }
}

TEST(GroupingTest, RejectsImpossibleBounds) {
  const std::vector<double> a = CliqueAndStragglers();
  EXPECT_FALSE(ControlledGrouping(a, 8, Groups{{0, 1, 2, 3}, {4, 5, 6, 7}},
                                  SizeBounds{.min_size = 5, .max_size = 6})
                   .ok());
  EXPECT_FALSE(ControlledGrouping(a, 8, Groups{{0, 1, 2}, {4, 5, 6, 7}},
                                  SizeBounds{.min_size = 1, .max_size = 6})
                   .ok());
}

TEST(GroupingTest, AffinityShareAndSizeDeviation) {
  const std::vector<double> a = Edges(4, {{0, 1, 3}, {2, 3, 1}, {1, 2, 4}});
  EXPECT_DOUBLE_EQ(IntraGroupAffinityShare(a, 4, Groups{{0, 1}, {2, 3}}), 0.5);
  EXPECT_DOUBLE_EQ(IntraGroupAffinityShare(a, 4, Groups{{0, 1, 2}, {3}}), 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(IntraGroupAffinityShare(std::vector<double>(16, 0.0), 4, Groups{{0, 1}, {2, 3}}),
                   1.0);
  EXPECT_DOUBLE_EQ(SizeDeviation(Groups{{0, 1}, {2, 3}}, 4), 0.0);
  EXPECT_DOUBLE_EQ(SizeDeviation(Groups{{0, 1, 2}, {3}}, 4), 1.0);
  EXPECT_DOUBLE_EQ(
      SizeDeviation(Groups{{0, 1, 2, 3, 4, 5}, {6}, {7}}, 8),
      std::sqrt(((6 - 8.0 / 3) * (6 - 8.0 / 3) + 2 * (1 - 8.0 / 3) * (1 - 8.0 / 3)) / 3));
}

std::vector<CurvePoint> Curve(const std::vector<std::pair<double, double>>& su) {
  std::vector<CurvePoint> c;
  for (size_t i = 0; i < su.size(); ++i) {
    c.push_back(CurvePoint{.r = 0.1 * i, .delta = 1, .u = su[i].second, .s = su[i].first});
  }
  return c;
}

TEST(KneeTest, FindsTheBendOfAConcaveCurve) {
  // Most of the gain comes with the first unit of deviation.
  EXPECT_EQ(KneeIndex(Curve({{0, 0}, {1, 0.8}, {2, 0.9}, {3, 0.95}, {4, 1.0}})), 1);
  // A later bend.
  EXPECT_EQ(KneeIndex(Curve({{0, 0.1}, {1, 0.2}, {2, 0.3}, {3, 0.9}, {6, 0.95}, {9, 1.0}})), 3);
  // U = 1 - exp(-S): the knee of the scaled curve is where its slope is 1/range.
  std::vector<std::pair<double, double>> smooth;
  for (int i = 0; i <= 40; ++i) smooth.emplace_back(0.1 * i, 1 - std::exp(-0.1 * i));
  const int knee = KneeIndex(Curve(smooth));
  // d/dS (U/(1-e^-4)) = 1/4 at S = ln(4 / (1 - e^-4)) ~ 1.405.
  EXPECT_NEAR(0.1 * knee, 1.405, 0.051);
}

TEST(KneeTest, FlatOrStraightCurvesKeepTheSmallestR) {
  EXPECT_EQ(KneeIndex(Curve({{0, 0.5}, {1, 0.5}, {2, 0.5}})), 0);
  EXPECT_EQ(KneeIndex(Curve({{0, 0}, {1, 1}, {2, 2}})), 0);
  EXPECT_EQ(KneeIndex(Curve({{1, 0.2}, {1, 0.2}})), 0);
}

TEST(KneeTest, GroupAtKneeWalksTheGrid) {
  const std::vector<double> a = CliqueAndStragglers();
  // Clusters as spectral clustering would give them: the clique with 4, and 5, 6, 7.
  const Groups clusters = GroupsFromLabels({0, 0, 0, 0, 0, 1, 1, 1}, 2);
  StatusOr<KneeGrouping> g = GroupAtKnee(a, 8, clusters, KneeOptions{.r_grid = {0.0, 0.25, 0.5}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->curve.size(), 3u);
  // r = 0: delta 1, sizes [3, 5] keep the clusters as they are; larger r changes nothing.
  EXPECT_EQ(g->curve[0].delta, 1);
  EXPECT_EQ(g->curve[2].delta, 2);
  EXPECT_EQ(g->knee, 0);
  EXPECT_EQ(g->groups, (Groups{{0, 1, 2, 3, 4}, {5, 6, 7}}));
  EXPECT_NEAR(g->curve[0].s, 1.0, 1e-12);
}

}  // namespace
}  // namespace epserve::placement
