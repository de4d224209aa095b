// Monotonic wall-clock time for the engine's own time accounting (stats, benchmarks).
#pragma once

#include <chrono>

namespace epserve {

// Seconds on the steady clock since an arbitrary epoch; only differences mean anything.
inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace epserve
