// EngineWorker: one Engine driven by one dedicated thread, fed by many HTTP threads.
//
// HTTP threads call Submit (answered by the engine thread, so the engine's own validation
// errors come back synchronously) and Cancel; both go through a mutex-protected queue that
// the engine thread drains before every step. With nothing queued and no work the engine
// thread sleeps on a condition variable. Each request's TokenEvents go to its RequestStream,
// which the submitting thread waits on with a timeout.
//
// Thread safety: every public method of EngineWorker and RequestStream may be called from any
// thread. The Engine (and its Model) must outlive the worker and must not be touched by anyone
// else while the worker runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"

namespace epserve::serve {

// The events of one request, in order. The last one carries a finish reason.
class RequestStream {
 public:
  // Engine thread.
  void Push(TokenEvent event);
  // Moves the queued events into *out, waiting up to `timeout` for at least one. Returns
  // false when none arrived in time.
  bool Pop(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout);
  // Asks the worker to cancel the request at its next step (client gone).
  void Abandon() { abandoned_ = true; }
  bool abandoned() const { return abandoned_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  std::atomic<bool> abandoned_{false};
};

// Counters for /metrics; a consistent copy taken under the worker's lock.
struct WorkerMetrics {
  int num_running = 0, num_waiting = 0;
  double kv_cache_usage = 0;  // referenced blocks / pool blocks, in [0, 1]
  int64_t prompt_tokens = 0, generation_tokens = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // prompt tokens / cached ones
  std::map<std::string, int64_t> finished;                  // finish reason -> requests
};

class EngineWorker {
 public:
  explicit EngineWorker(Engine& engine);
  ~EngineWorker();  // Shutdown()
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Queues the request; events go to `stream`. Errors: the engine's (InvalidArgument), or
  // Unavailable after shutdown began or when the engine thread does not answer in `timeout`.
  StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestStream> stream,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // The request ends with FinishReason::kCancelled at the next step; unknown ids are ignored.
  // `count_as` is the reason /metrics counts it under (kStop when a stop string ended it).
  void Cancel(RequestId id, FinishReason count_as = FinishReason::kCancelled);
  // Stops accepting requests and cancels every request still queued or running.
  void CancelAll();
  // CancelAll, lets the engine finish the cancellations, joins the thread. Idempotent.
  void Shutdown();

  WorkerMetrics Metrics() const;

 private:
  struct PendingSubmit;
  void Loop();
  void ApplyQueued(std::vector<std::shared_ptr<PendingSubmit>> submits,
                   std::vector<std::pair<RequestId, FinishReason>> cancels, bool cancel_all);
  void Deliver(std::vector<TokenEvent> events);
  void FailAll(const std::string& error);
  void UpdateMetrics();

  Engine& engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingSubmit>> submits_;        // guarded by mu_
  std::vector<std::pair<RequestId, FinishReason>> cancels_;    // guarded by mu_
  bool cancel_all_ = false, accepting_ = true, stop_ = false;  // guarded by mu_
  WorkerMetrics metrics_;                                      // guarded by mu_
  // Engine thread only.
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  std::unordered_map<RequestId, FinishReason> count_as_;  // cancelled requests counted otherwise
  std::thread thread_;
};

}  // namespace epserve::serve
