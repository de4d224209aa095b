#include "base/thread_pool.h"

#include <algorithm>

#include "base/check.h"

namespace epserve {

namespace {
// Chunk [begin, end) of thread t when n items (in units of grain) go to num threads.
void ChunkOf(size_t n, size_t grain, int num, int t, size_t* begin, size_t* end) {
  size_t units = (n + grain - 1) / grain;
  size_t per = units / num, extra = units % num;
  size_t ub = t * per + std::min<size_t>(t, extra);
  size_t ue = ub + per + (static_cast<size_t>(t) < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

int ThreadPool::DefaultThreads(int local_ranks) {
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  return std::max(1, hw / std::max(1, local_ranks));
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  size_t b, e;
  ChunkOf(n, grain, num_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t, int)>* job;
    size_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      grain = job_grain_;
    }
    size_t b, e;
    ChunkOf(n, grain, num_threads_, thread_idx, &b, &e);
    if (b < e) (*job)(b, e, thread_idx);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace epserve
