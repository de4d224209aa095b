#include "placement/machine_load.h"

#include <gtest/gtest.h>

#include <vector>

namespace epserve::placement {
namespace {

TEST(MachineLoadTest, ReplaysTheProfileThroughTheRouter) {
  // 3 machines; expert 0 on machine 1 only; expert 1 at home on machine 2 with a light copy on
  // machine 1; expert 2 on machine 0. Sets {0, 1} x 3 tokens and {1, 2} x 6 tokens, spread
  // evenly over the machines (1 and 2 tokens from each).
  const TokenSets sets = TokenSets::FromSets(3, 2, {0, 1, 1, 2}, {3, 6});
  const std::vector<std::vector<MachineCopy>> copies = {
      {{.node = 1}}, {{.node = 2}, {.node = 1, .weight = 1e-3}}, {{.node = 0}}};
  const std::vector<double> remote =
      PredictRemoteArrivals(sets, copies, 3, RoutingPolicy::kTopology);
  ASSERT_EQ(remote.size(), 9u);
  auto at = [&](int e, int m) { return remote[e * 3 + m]; };
  // {0, 1} from machine 0: both to machine 1 (it must go there for expert 0); from machine 2:
  // expert 0 to machine 1. {1, 2} from machine 0: expert 1 home to machine 2; from machines 1
  // and 2: expert 2 to machine 0.
  EXPECT_DOUBLE_EQ(at(0, 1), 2.0);
  EXPECT_DOUBLE_EQ(at(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(at(1, 2), 2.0);
  EXPECT_DOUBLE_EQ(at(2, 0), 4.0);
  double total = 0;
  for (double r : remote) total += r;
  EXPECT_DOUBLE_EQ(total, 9.0);
}

}  // namespace
}  // namespace epserve::placement
