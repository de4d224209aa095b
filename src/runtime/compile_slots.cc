#include "runtime/compile_slots.h"

#include <algorithm>
#include <thread>

namespace epserve {

CompileSlots::CompileSlots(int slots) { stats_.slots = std::max(1, slots); }

CompileSlots& CompileSlots::Process() {
  static CompileSlots* slots =
      new CompileSlots(static_cast<int>(std::thread::hardware_concurrency() / 2));
  return *slots;
}

Status CompileSlots::Run(const std::function<void()>& fn, std::chrono::milliseconds wait) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++stats_.waiting;
    const bool got = cv_.wait_for(lock, wait, [this] { return stats_.busy < stats_.slots; });
    --stats_.waiting;
    if (!got) {
      ++stats_.timeouts;
      return Status::Unavailable("every grammar compile slot stayed busy for " +
                                 std::to_string(wait.count()) + " ms (" +
                                 std::to_string(stats_.slots) + " slots)");
    }
    ++stats_.busy;
  }
  // The slot is given back however fn ends (an exception, bad_alloc, included).
  struct Release {
    CompileSlots* self;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Release() {
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
      {
        std::lock_guard<std::mutex> lock(self->mu_);
        --self->stats_.busy;
        ++self->stats_.runs;
        self->stats_.seconds += s.count();
      }
      self->cv_.notify_one();
    }
  } release{this};
  fn();
  return Status::Ok();
}

CompileSlots::Stats CompileSlots::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace epserve
