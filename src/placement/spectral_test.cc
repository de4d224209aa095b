#include "placement/spectral.h"

#include <gtest/gtest.h>

#include <vector>

namespace epserve::placement {
namespace {

// n x n affinity with `strong` inside the blocks and `weak` across them.
std::vector<double> BlockAffinity(const std::vector<int>& block_of, double strong, double weak) {
  const size_t n = block_of.size();
  std::vector<double> a(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) a[i * n + j] = block_of[i] == block_of[j] ? strong : weak;
    }
  }
  return a;
}

TEST(SpectralTest, FindsTwoObviousClusters) {
  // Members interleaved so that the answer does not follow from the ids.
  const std::vector<int> block_of = {0, 1, 0, 1, 0, 1, 0, 1};
  StatusOr<std::vector<int>> labels =
      SpectralCluster(BlockAffinity(block_of, 10, 1), 8, SpectralOptions{.num_clusters = 2});
  ASSERT_TRUE(labels.ok()) << labels.status().message();
  EXPECT_EQ(*labels, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(SpectralTest, FindsUnequalClusters) {
  const std::vector<int> block_of = {2, 0, 0, 1, 2, 0, 0, 1, 0, 0};
  StatusOr<std::vector<int>> labels =
      SpectralCluster(BlockAffinity(block_of, 20, 0.5), 10, SpectralOptions{.num_clusters = 3});
  ASSERT_TRUE(labels.ok()) << labels.status().message();
  // Same partition, clusters numbered by first member.
  EXPECT_EQ(*labels, (std::vector<int>{0, 1, 1, 2, 0, 1, 1, 2, 1, 1}));
}

TEST(SpectralTest, DisconnectedExpertsDoNotBreakIt) {
  std::vector<int> block_of = {0, 0, 0, 1, 1, 1};
  std::vector<double> a = BlockAffinity(block_of, 5, 0);
  // Expert 6 was never chosen together with anyone.
  std::vector<double> b(7 * 7, 0.0);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) b[i * 7 + j] = a[i * 6 + j];
  }
  StatusOr<std::vector<int>> labels = SpectralCluster(b, 7, SpectralOptions{.num_clusters = 2});
  ASSERT_TRUE(labels.ok());
  EXPECT_EQ((*labels)[0], (*labels)[1]);
  EXPECT_EQ((*labels)[3], (*labels)[4]);
  EXPECT_NE((*labels)[0], (*labels)[3]);
}

TEST(SpectralTest, IsDeterministic) {
  const std::vector<int> block_of = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  const std::vector<double> a = BlockAffinity(block_of, 3, 1);
  const SpectralOptions options{.num_clusters = 4, .seed = 42};
  EXPECT_EQ(*SpectralCluster(a, 12, options), *SpectralCluster(a, 12, options));
}

TEST(SpectralTest, RejectsBadInput) {
  std::vector<double> asymmetric = {0, 1, 2, 0};
  EXPECT_FALSE(SpectralCluster(asymmetric, 2, SpectralOptions{.num_clusters = 2}).ok());
  std::vector<double> negative = {0, -1, -1, 0};
  EXPECT_FALSE(SpectralCluster(negative, 2, SpectralOptions{.num_clusters = 2}).ok());
  std::vector<double> ok = {0, 1, 1, 0};
  EXPECT_FALSE(SpectralCluster(ok, 2, SpectralOptions{.num_clusters = 3}).ok());
  EXPECT_FALSE(SpectralCluster(ok, 3, SpectralOptions{.num_clusters = 2}).ok());
}

TEST(KMeansTest, SeparatesPointGroups) {
  const std::vector<double> points = {0, 0, 0.1, 0, 10, 10, 0, 0.2, 10.1, 9.9, 9.8, 10};
  StatusOr<std::vector<int>> labels = KMeans(points, 6, 2, KMeansOptions{.num_clusters = 2});
  ASSERT_TRUE(labels.ok());
  EXPECT_EQ(*labels, (std::vector<int>{0, 0, 1, 0, 1, 1}));
}

TEST(KMeansTest, KeepsEveryClusterNonEmpty) {
  // Four identical points and three clusters.
  const std::vector<double> points(4, 1.0);
  StatusOr<std::vector<int>> labels = KMeans(points, 4, 1, KMeansOptions{.num_clusters = 3});
  ASSERT_TRUE(labels.ok());
  std::vector<int> count(3, 0);
  for (int l : *labels) ++count[l];
  for (int c : count) EXPECT_GE(c, 1);
}

}  // namespace
}  // namespace epserve::placement
