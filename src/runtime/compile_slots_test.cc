#include "runtime/compile_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace epserve {
namespace {

TEST(CompileSlotsTest, AtMostSlotsRunAtOnceAndWaitersTimeOut) {
  CompileSlots slots(2);
  std::atomic<int> running{0}, most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&] {
      Status st = slots.Run(
          [&] {
            const int now = ++running;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            --running;
          },
          std::chrono::seconds(10));
      EXPECT_TRUE(st.ok()) << st.message();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(most.load(), 2);
  EXPECT_EQ(slots.stats().runs, 6);
  // Both slots held: a third caller gives up after its wait, without running.
  std::atomic<bool> release{false};
  std::vector<std::thread> holders;
  for (int i = 0; i < 2; ++i)
    holders.emplace_back([&] {
      (void)slots.Run(
          [&] {
            while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          },
          std::chrono::seconds(10));
    });
  while (slots.stats().busy < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool ran = false;
  Status st = slots.Run([&] { ran = true; }, std::chrono::milliseconds(30));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(ran);
  release = true;
  for (auto& t : holders) t.join();
  EXPECT_EQ(slots.stats().timeouts, 1);
  EXPECT_EQ(slots.stats().busy, 0);
}

TEST(CompileSlotsTest, AnExceptionGivesTheSlotBack) {
  CompileSlots slots(1);
  EXPECT_THROW((void)slots.Run([] { throw std::bad_alloc(); }, std::chrono::seconds(1)),
               std::bad_alloc);
  EXPECT_EQ(slots.stats().busy, 0);
  EXPECT_TRUE(slots.Run([] {}, std::chrono::milliseconds(100)).ok());
}

}  // namespace
}  // namespace epserve
