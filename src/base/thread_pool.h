// A fixed-size pool of worker threads for data-parallel loops.
// The caller thread takes part in every ParallelFor, so a pool of size 1 has no workers
// and runs everything inline. Work is split statically into contiguous chunks, a few per
// thread (each thread's share halved again and again: 1/2, 1/4, ... of it, so the chunks left
// to take near the end are small), whose boundaries depend only on (n, grain, num_threads):
// the same call gives the same split on every run, so kernels whose per-element work does not
// depend on the split are bit-identical for any thread count. Thread t first runs its own
// contiguous run of chunks in index order, so a kernel that splits a weight matrix by rows has
// every thread stream its own share of it (and on a multi-socket machine, weights first touched
// through the same split land on the node of the thread that streams them). A thread that finishes
// early takes chunks nobody has started, so a worker that is slow to wake or descheduled on a busy
// machine delays little. Between calls, workers spin briefly before sleeping, because decode
// issues hundreds of short loops per step and a futex wake-up per loop would cost more than
// the loop. For the same reason a loop's fixed cost is kept to a few cache-line transfers: each
// chunk's claim sits on its own cache line (a thread claiming its own chunks touches nothing
// the other threads use), each thread reports the chunks it ran once, not per chunk, and the
// mutex and condition variables are touched only when some thread actually sleeps.
// Thread safety: ParallelFor may be called from one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
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

  // Calls fn(begin, end, thread_idx) over disjoint chunks covering [0, n); each chunk runs
  // exactly once. Chunks are multiples of `grain` (except the last). thread_idx < num_threads()
  // is the thread running the chunk (0: the caller); a thread runs its chunks one after
  // another, so per-thread scratch indexed by thread_idx is safe. Returns when all are done.
  // An exception thrown by fn on any thread is rethrown here, in the caller, after every chunk
  // has finished (the first one thrown, if several are); the pool stays usable.
  void ParallelFor(size_t n, size_t grain,
                   const std::function<void(size_t begin, size_t end, int thread_idx)>& fn);

  // While set, the calling thread runs `hook` after each chunk it runs, and even a one-thread
  // pool splits its loops into chunks: a long loop then gives the caller regular moments for
  // other work, such as moving MPI transfers forward (MPI advances them only inside its calls,
  // and only the caller may make them). Kernels split by output never change their results with
  // the chunking. Set and cleared between loops, from the calling thread; nullptr clears.
  void SetCallerHook(std::function<void()> hook) { hook_ = std::move(hook); }

  // Threads to use by default: hardware threads divided by ranks on this machine.
  static int DefaultThreads(int local_ranks = 1);

  // Chunk c of the NumChunks(n, grain, num_threads) chunks a ParallelFor(n, grain) on
  // num_threads threads uses: [*begin, *end).
  static void ChunkOf(size_t n, size_t grain, int num_threads, int c, size_t* begin, size_t* end);
  static int NumChunks(size_t n, size_t grain, int num_threads);

  static constexpr int kChunksPerThread = 6;

 private:
  void WorkerLoop(int thread_idx);
  // Claims chunk c of the generation in `word` (see generation_) and runs it on thread t;
  // false if already claimed.
  bool TryRun(int c, int t, uint64_t word);
  // Runs thread t's own chunks, then any unclaimed ones, then adds how many it ran to done_.
  void RunChunks(int t, uint64_t word);
  // Wakes the caller if it sleeps waiting for the last chunk.
  void NotifyDone();

  int num_threads_;
  std::function<void()> hook_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Job description; written by the caller before generation_ is bumped (release). The job and
  // generation_ share one cache line: a worker that sees the new generation has the job too.
  alignas(64) const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  // (generation << 16) | number of chunks; published after the job fields (release).
  std::atomic<uint64_t> generation_{0};
  // claimed_[c].gen: the last generation whose chunk c was claimed; one cache line each.
  struct alignas(64) Claim {
    std::atomic<uint64_t> gen{0};
  };
  std::unique_ptr<Claim[]> claimed_;
  alignas(64) std::atomic<int> done_{0};  // chunks finished in the current generation
  // Read on every loop, written only around sleeps: their own line.
  alignas(64) std::atomic<int> sleepers_{0};  // workers asleep on start_cv_ (or about to be)
  std::atomic<bool> caller_sleeps_{false};    // the caller waits on done_cv_ (or is about to)
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;            // the first exception of the current job; guarded by mu_
  std::atomic<bool> has_error_{false};  // error_ is set
};

}  // namespace epserve
