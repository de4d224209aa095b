// A fixed-size pool of worker threads for data-parallel loops.
// The caller thread takes part in every ParallelFor, so a pool of size 1 has no workers
// and runs everything inline. Work is split statically into contiguous chunks, so the
// same call with the same size gives the same split on every run (deterministic results),
// and thread t always gets the t-th contiguous share: a kernel that splits a weight matrix
// by rows has every thread stream its own share of it. (On a multi-socket machine, weights
// first touched by the thread that later streams them land on that thread's NUMA node.)
// Between calls, workers spin briefly before sleeping, because decode issues hundreds of
// short loops per step and a futex wake-up per loop would cost more than the loop.
// Thread safety: ParallelFor may be called from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace epserve {

class ThreadPool {
 public:
  // num_threads >= 1; counts the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_idx) over disjoint chunks covering [0, n). Chunks are
  // multiples of `grain` (except the last); thread t gets the t-th chunk in index order.
  // Returns when all chunks are done.
  void ParallelFor(size_t n, size_t grain,
                   const std::function<void(size_t begin, size_t end, int thread_idx)>& fn);

  // Threads to use by default: hardware threads divided by ranks on this machine.
  static int DefaultThreads(int local_ranks = 1);

  // The chunk [*begin, *end) that thread t of num gets in ParallelFor(n, grain, ...).
  static void ChunkOf(size_t n, size_t grain, int num, int t, size_t* begin, size_t* end);

 private:
  void WorkerLoop(int thread_idx);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Job description; written by the caller before generation_ is bumped (release).
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace epserve
