// How the HTTP server gives connections threads (cpp-httplib's TaskQueue). Its stock pool has a
// fixed number of threads that a few hundred slow clients (slowloris: headers a byte at a
// time) or long streams hold, and every other connection, /health included, then waits.
// ConnectionQueue gives each connection its own thread instead, up to `max_connections` at
// once; connections beyond that (up to as many again) still get a thread but are marked
// overloaded, and the server answers them at once with 503 (except /health, answered as
// usual, so a flood cannot hide the server's state); beyond twice the bound they wait for a
// thread. Threads end with their connection.
// Thread safety: enqueue and shutdown may be called from any thread (cpp-httplib calls them
// from the accept loop and Stop).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace epserve::serve {

class ConnectionQueue : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(int max_connections) : max_(max_connections) {}
  ~ConnectionQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  // Waits until every connection's thread has ended.
  void shutdown() override;

  // On a connection's thread: whether it arrived beyond max_connections.
  static bool Overloaded();
  int max_connections() const { return max_; }

 private:
  void Start(std::function<void()> fn, bool overloaded);  // REQUIRES: mu_ held

  const int max_;
  std::mutex mu_;
  std::condition_variable done_;
  int running_ = 0;
  std::deque<std::function<void()>> waiting_;  // beyond twice the bound
};

}  // namespace epserve::serve
