#include "base/guarded_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

namespace epserve {
namespace {

TEST(GuardedThreadTest, RunsTheBody) {
  std::atomic<int> ran{0};
  std::thread t = GuardedThread("test", [&] { ran = 1; });
  t.join();
  EXPECT_EQ(ran.load(), 1);
}

// An escaping exception ends the process with exit code 2 and one line naming the thread.
TEST(GuardedThreadDeathTest, EscapedExceptionExitsWithItsName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::thread t =
            GuardedThread("the health checker", [] { throw std::runtime_error("boom"); });
        t.join();
      },
      ::testing::ExitedWithCode(2), "epserve: internal error in the health checker: boom");
}

}  // namespace
}  // namespace epserve
