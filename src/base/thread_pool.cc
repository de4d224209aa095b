#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"

namespace epserve {

namespace {

// How long a worker (or the caller, waiting for workers) spins before it sleeps.
constexpr auto kSpinFor = std::chrono::microseconds(200);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or kSpinFor has passed; returns done().
template <typename Pred>
bool SpinUntil(const Pred& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
  for (int i = 0;; ++i) {
    if (done()) return true;
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

void ThreadPool::ChunkOf(size_t n, size_t grain, int num, int t, size_t* begin, size_t* end) {
  size_t units = (n + grain - 1) / grain;
  size_t per = units / num, extra = units % num;
  size_t ub = t * per + std::min<size_t>(t, extra);
  size_t ue = ub + per + (static_cast<size_t>(t) < extra ? 1 : 0);
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
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
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    // Bumping under the mutex: a worker that found no new generation under the lock is
    // already waiting when notify_all runs, so no wake-up is lost.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  size_t b, e;
  ChunkOf(n, grain, num_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
  }
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    auto woken = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, woken);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    size_t b, e;
    ChunkOf(job_n_, job_grain_, num_threads_, thread_idx, &b, &e);
    if (b < e) (*job_)(b, e, thread_idx);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace epserve
