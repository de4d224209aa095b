// CompileSlots: how many request constraints (grammars compiled from schemas and tool lists)
// may be made at once in this process. Constraints are made on the requests' own threads
// (HTTP in `serve`, gRPC in `engine`) before a request reaches the engine loop, so a costly
// compile never stalls a step; the slots keep many such compiles from taking every core the
// stepping thread needs. A request waits for a slot in its own thread, bounded by its deadline.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "base/status.h"

namespace epserve {

class CompileSlots {
 public:
  explicit CompileSlots(int slots);
  // The process's slots: max(1, hardware threads / 2).
  static CompileSlots& Process();

  // Runs `fn` once a slot is free; Unavailable (fn not run) when none came free within `wait`.
  Status Run(const std::function<void()>& fn, std::chrono::milliseconds wait);

  struct Stats {
    int slots = 0, busy = 0, waiting = 0;
    int64_t runs = 0, timeouts = 0;
    double seconds = 0;  // spent in fn, summed
  };
  Stats stats() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Stats stats_;
};

}  // namespace epserve
