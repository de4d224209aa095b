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

int ThreadPool::NumChunks(size_t n, size_t grain, int num_threads) {
  const size_t units = (n + grain - 1) / grain;
  return static_cast<int>(
      std::min<size_t>(units, static_cast<size_t>(num_threads) * kChunksPerThread));
}

void ThreadPool::ChunkOf(size_t n, size_t grain, int num_threads, int c, size_t* begin,
                         size_t* end) {
  const size_t units = (n + grain - 1) / grain;
  const size_t threads = static_cast<size_t>(std::max(1, num_threads));
  const int chunks = NumChunks(n, grain, num_threads);
  size_t ub, ue;
  if (static_cast<size_t>(chunks) < threads * kChunksPerThread) {  // one unit per chunk
    ub = static_cast<size_t>(c);
    ue = ub + 1;
  } else {
    // Thread t's own units, split in halves: 1/2, 1/4, ... of its share, so a thread that
    // finishes early finds small chunks left to take and the wait at the end is short.
    const size_t t = static_cast<size_t>(c) / kChunksPerThread;
    const int piece = c % kChunksPerThread;
    ub = units * t / threads;
    size_t rest = units * (t + 1) / threads - ub;
    size_t size = 0;
    for (int i = 0; i <= piece; ++i) {
      ub += size;
      rest -= size;
      const size_t left_after = static_cast<size_t>(kChunksPerThread - 1 - i);
      size = i == kChunksPerThread - 1
                 ? rest
                 : std::max<size_t>(1, std::min((rest + 1) / 2, rest - left_after));
    }
    ue = ub + size;
  }
  *begin = std::min(n, ub * grain);
  *end = std::min(n, ue * grain);
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)),
      claimed_(new Claim[static_cast<size_t>(num_threads_) * kChunksPerThread]) {
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

// generation_ packs (generation << 16 | chunks), so every thread reads the chunk count of the
// generation it acts on, never a count the caller has already rewritten for the next one.
namespace {
constexpr int kChunkBits = 16;
uint64_t Generation(uint64_t word) { return word >> kChunkBits; }
int Chunks(uint64_t word) { return static_cast<int>(word & ((uint64_t{1} << kChunkBits) - 1)); }
}  // namespace

bool ThreadPool::TryRun(int c, int t, uint64_t word) {
  // A claim succeeds only while its generation is in progress: the caller does not finish (and
  // rewrite the job) before every chunk of it is claimed, and a thread holding an older
  // generation finds all of that generation's chunks claimed already. So the job fields read
  // below belong to this generation.
  const uint64_t gen = Generation(word);
  uint64_t prev = claimed_[c].gen.load(std::memory_order_acquire);
  do {
    if (prev >= gen) return false;
  } while (!claimed_[c].gen.compare_exchange_weak(prev, gen, std::memory_order_acq_rel));
  size_t b, e;
  ChunkOf(job_n_, job_grain_, num_threads_, c, &b, &e);
  if (b < e) {
    try {
      (*job_)(b, e, t);
    } catch (...) {
      // Kept for the caller, which rethrows it once every chunk is done; the other chunks
      // still run (a chunk has no way to cancel its siblings, and they are short).
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      has_error_.store(true, std::memory_order_relaxed);
    }
  }
  return true;
}

void ThreadPool::NotifyDone() {
  // Pairs with the caller's store of caller_sleeps_ before it checks done_ (both seq_cst):
  // either it sees this thread's count, or this thread sees it asleep and wakes it.
  if (caller_sleeps_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_one();
  }
}

void ThreadPool::RunChunks(int t, uint64_t word) {
  const int chunks = Chunks(word);
  // Own run first (contiguous, in order).
  const int own_begin = static_cast<int>(static_cast<int64_t>(chunks) * t / num_threads_);
  const int own_end = static_cast<int>(static_cast<int64_t>(chunks) * (t + 1) / num_threads_);
  int ran = 0;
  for (int c = own_begin; c < own_end; ++c)
    if (TryRun(c, t, word)) {
      ++ran;
      if (t == 0 && hook_) hook_();
    }
  // Then other threads' chunks from their ends backwards: the smallest first, while their
  // owners work forwards through the big ones.
  for (int i = 1; i < chunks; ++i) {
    const int c = (own_begin - i + chunks) % chunks;
    if ((c < own_begin || c >= own_end) && TryRun(c, t, word)) {
      ++ran;
      if (t == 0 && hook_) hook_();
    }
  }
  // One count per thread and loop, not per chunk: done_ is the line every thread writes.
  if (ran > 0 && done_.fetch_add(ran, std::memory_order_seq_cst) + ran == chunks && t != 0)
    NotifyDone();
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (n <= grain || (num_threads_ == 1 && !hook_)) {
    fn(0, n, 0);
    return;
  }
  if (num_threads_ == 1) {
    for (int c = 0, chunks = NumChunks(n, grain, 1); c < chunks; ++c) {
      size_t b, e;
      ChunkOf(n, grain, 1, c, &b, &e);
      if (b < e) fn(b, e, 0);
      hook_();
    }
    return;
  }
  const int chunks = NumChunks(n, grain, num_threads_);
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t word =
      ((Generation(generation_.load(std::memory_order_relaxed)) + 1) << kChunkBits) |
      static_cast<uint64_t>(chunks);
  // Pairs with a worker's store of sleepers_ before it checks generation_ (both seq_cst): either
  // it sees the new generation, or this thread sees it asleep and wakes it (under the mutex, so
  // the wake-up cannot fall between its check and its wait).
  generation_.store(word, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    start_cv_.notify_all();
  }
  RunChunks(0, word);
  auto all_done = [this, chunks] { return done_.load(std::memory_order_seq_cst) == chunks; };
  if (!SpinUntil(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeps_.store(true, std::memory_order_seq_cst);
    done_cv_.wait(lock, all_done);
    caller_sleeps_.store(false, std::memory_order_relaxed);
  }
  // Every chunk's thread set has_error_ (if it threw) before its count reached done_.
  if (has_error_.load(std::memory_order_relaxed)) {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(error, error_);
      has_error_.store(false, std::memory_order_relaxed);
    }
    std::rethrow_exception(error);
  }
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    auto woken = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_seq_cst) != seen;
    };
    if (!SpinUntil(woken)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      start_cv_.wait(lock, woken);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks(thread_idx, seen);
  }
}

}  // namespace epserve
