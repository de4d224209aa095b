#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace epserve {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 7u, 64u, 1001u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 4, [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i)
        EXPECT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ReusableManyTimes) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int r = 0; r < 200; ++r)
    pool.ParallelFor(100, 1, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) sum += static_cast<long>(i);
    });
  EXPECT_EQ(sum.load(), 200L * 4950);
}

// An exception thrown in a chunk, on whichever thread runs it, reaches the caller of
// ParallelFor once every chunk has run; the pool then works as before.
TEST(ThreadPoolTest, ExceptionInAChunkReachesTheCaller) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (size_t bad : {0u, 50u, 99u}) {
      std::atomic<int> ran{0};
      try {
        pool.ParallelFor(100, 1, [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) {
            ran++;
            if (i == bad) throw std::runtime_error("chunk " + std::to_string(i));
          }
        });
        ADD_FAILURE() << "no exception, threads " << threads;
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "chunk " + std::to_string(bad));
      }
      // Every other chunk still ran (only the rest of the throwing chunk is skipped).
      EXPECT_GE(ran.load(), threads == 1 ? static_cast<int>(bad) + 1 : 1);
      std::atomic<long> sum{0};
      pool.ParallelFor(100, 1, [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) sum += static_cast<long>(i);
      });
      EXPECT_EQ(sum.load(), 4950) << threads;
    }
  }
}

// Each thread's share is cut into chunks that halve (so what is left to steal near the end is
// small), the shares are contiguous and in thread order, and together they tile [0, n).
TEST(ThreadPoolTest, ChunksHalveWithinEachThreadsShare) {
  for (int threads : {2, 3}) {
    const size_t n = 1000, grain = 1;
    const int chunks = ThreadPool::NumChunks(n, grain, threads);
    ASSERT_EQ(chunks, threads * ThreadPool::kChunksPerThread);
    size_t expect_begin = 0;
    for (int t = 0; t < threads; ++t) {
      const size_t share = n * (t + 1) / threads - n * t / threads;
      std::vector<size_t> sizes;
      for (int c = t * ThreadPool::kChunksPerThread; c < (t + 1) * ThreadPool::kChunksPerThread;
           ++c) {
        size_t b, e;
        ThreadPool::ChunkOf(n, grain, threads, c, &b, &e);
        ASSERT_EQ(b, expect_begin) << "chunk " << c;
        ASSERT_GT(e, b) << "chunk " << c;
        sizes.push_back(e - b);
        expect_begin = e;
      }
      EXPECT_EQ(sizes.front(), (share + 1) / 2) << "thread " << t;
      for (size_t i = 1; i < sizes.size(); ++i) EXPECT_LE(sizes[i], sizes[i - 1]) << "thread " << t;
      EXPECT_LE(sizes.back(), share / 16) << "thread " << t;
    }
    EXPECT_EQ(expect_begin, n);
  }
}

// Chunks may be run by any thread, but each exactly once per call, covering [0, n) in the
// deterministic split, each thread running its chunks one at a time.
TEST(ThreadPoolTest, EveryChunkOnceUnderStress) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) {
      const size_t n = 1 + rep % 53, grain = 1 + rep % 3;
      std::vector<std::atomic<int>> hits(n);
      std::vector<std::atomic<int>> busy(threads);
      std::atomic<bool> overlap{false};
      std::vector<std::pair<size_t, size_t>> ranges;
      std::mutex mu;
      pool.ParallelFor(n, grain, [&](size_t b, size_t e, int t) {
        if (busy[t]++ != 0) overlap = true;
        for (size_t i = b; i < e; ++i) hits[i]++;
        {
          std::lock_guard<std::mutex> lock(mu);
          ranges.push_back({b, e});
        }
        busy[t]--;
      });
      ASSERT_FALSE(overlap.load());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
      if (n <= grain) continue;  // ran inline as one chunk
      const int chunks = ThreadPool::NumChunks(n, grain, threads);
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<size_t, size_t>> expected;
      for (int c = 0; c < chunks; ++c) {
        size_t b, e;
        ThreadPool::ChunkOf(n, grain, threads, c, &b, &e);
        if (b < e) expected.push_back({b, e});
      }
      ASSERT_EQ(ranges, expected);
    }
  }
}

// The slow paths: workers that went to sleep between loops (idle longer than their spin) must
// be woken, and a caller that waits longer than its spin for a worker's chunk must be woken
// when it ends. A lost wake-up hangs here; the test runs with a bound under CTest.
TEST(ThreadPoolTest, SleepingWorkersAndCallerAreWoken) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 40; ++rep) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rep % 2 == 0 ? 2 : 0));
      const size_t n = 2 + rep % 13;
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 1, [&](size_t b, size_t e, int t) {
        // A worker's chunk outlasts the caller's spin, so the caller sleeps on it.
        if (t != 0 && rep % 4 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << rep;
    }
  }
}

TEST(ThreadPoolTest, CallerHookRunsBetweenTheCallersChunks) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const std::thread::id caller = std::this_thread::get_id();
    int hooks = 0;
    bool off_thread = false;
    pool.SetCallerHook([&] {
      ++hooks;
      off_thread |= std::this_thread::get_id() != caller;
    });
    std::vector<std::atomic<int>> seen(1000);
    int caller_chunks = 0;
    pool.ParallelFor(seen.size(), 10, [&](size_t b, size_t e, int t) {
      for (size_t i = b; i < e; ++i) seen[i]++;
      if (t == 0) ++caller_chunks;
    });
    for (auto& v : seen) ASSERT_EQ(v.load(), 1);
    EXPECT_FALSE(off_thread);
    EXPECT_EQ(hooks, caller_chunks) << threads;
    // One thread runs every chunk itself, so the hook runs between all of them. With workers
    // the caller may run none: a worker that starts first takes unclaimed chunks, the
    // caller's own included.
    if (threads == 1) {
      EXPECT_EQ(hooks, ThreadPool::kChunksPerThread);
    }
    pool.SetCallerHook(nullptr);
    pool.ParallelFor(seen.size(), 10, [&](size_t, size_t, int) {});
    EXPECT_EQ(hooks, caller_chunks);
  }
}

}  // namespace
}  // namespace epserve
