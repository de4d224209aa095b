#include "serve/connection_queue.h"

#include <thread>

namespace epserve::serve {

namespace {
thread_local bool overloaded = false;
}  // namespace

bool ConnectionQueue::Overloaded() { return overloaded; }

void ConnectionQueue::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ >= 2 * max_) {
    waiting_.push_back(std::move(fn));
    return;
  }
  Start(std::move(fn), running_ >= max_);
}

void ConnectionQueue::Start(std::function<void()> fn, bool over) {
  ++running_;
  std::thread([this, fn = std::move(fn), over]() mutable {
    for (;;) {
      overloaded = over;
      fn();
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty() || running_ > 2 * max_) {
        --running_;
        done_.notify_all();
        return;
      }
      // Take a waiting connection on this thread; it counts as overloaded when the others
      // running already fill the bound.
      fn = std::move(waiting_.front());
      waiting_.pop_front();
      over = running_ > max_;
    }
  }).detach();
}

void ConnectionQueue::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return running_ == 0; });
}

}  // namespace epserve::serve
