// EngineWorker: one Engine driven by one stepping thread, fed by many request threads (HTTP in
// `epserve serve`, gRPC in `epserve engine`).
//
// Request threads call Submit (answered by the stepping thread, so the engine's own validation
// errors come back synchronously) and Cancel; both go through a mutex-protected queue that the
// stepping thread drains before every step. In one process, with nothing queued and no work,
// the stepping thread sleeps on a condition variable. Under expert parallelism
// (options.lockstep) every rank runs a worker and they step in lock-step (runtime/lockstep.h):
// idle ranks agree every `idle_poll` whether anyone has work, TP followers replay their leader's
// plans, and a stop asked of any rank (RequestStop, e.g. on SIGTERM) winds every rank down
// together. MPI is initialised for one calling thread, so a distributed worker steps on the
// thread that calls Run() instead of its own.
//
// Each request's TokenEvents go to its RequestStream, which the submitting thread waits on with
// a timeout.
//
// Thread safety: every public method of EngineWorker and RequestStream may be called from any
// thread. The Engine (and its Model) must outlive the worker and must not be touched by anyone
// else while the worker runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"
#include "runtime/lockstep.h"

namespace epserve {

// The events of one request, in order. The last one carries a finish reason.
class RequestStream {
 public:
  // Stepping thread (or an RPC client's reader).
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

// An engine's counters (for /metrics and routing); a consistent copy taken under the worker's
// lock.
struct WorkerMetrics {
  int num_running = 0, num_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;  // used: referenced by requests
  int64_t prompt_tokens = 0, generation_tokens = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // prompt tokens / cached ones
  int64_t spec_draft_tokens = 0, spec_accepted_tokens = 0;  // MTP drafts verified / kept
  std::map<std::string, int64_t> finished;                  // finish reason -> requests
  // Requests are queued or running and no step has finished for this long (a stalled group:
  // a rank stopped or stuck in a collective); 0 otherwise.
  int64_t stalled_ms = 0;
  // Online re-placement (runtime/online_placer.h), reported by the group holding world rank 0:
  // switches, bytes of experts loaded and boundary pauses (sums), and the cross-machine copies
  // per token measured on live traffic in the window before the last switch and since it (as of
  // the last gather or switch); -1: not measured.
  int64_t replacements = 0, replacement_bytes = 0;
  double replacement_pause_seconds = 0;
  double cross_copies_before = -1, cross_copies_since = -1;
  // The engine process's compiled-grammar cache (grammar/grammar.h: bytes held, grammars) and
  // the time its compile slots spent making constraints (runtime/compile_slots.h).
  int64_t grammar_cache_bytes = 0, grammar_cache_entries = 0;
  double grammar_compile_seconds = 0;
  double kv_cache_usage() const {
    return kv_blocks_total > 0 ? static_cast<double>(kv_blocks_used) / kv_blocks_total : 0;
  }
};

struct EngineWorkerOptions {
  Lockstep lockstep;  // default: one process, own thread
  // Distributed: how long idle ranks wait between agreements (the latency a new request can
  // add to an idle world).
  std::chrono::milliseconds idle_poll{2};
  // Tests only: called before each step that runs a plan (fault injection: a hook that throws
  // stands for a bug or an allocation failure inside the step).
  std::function<void()> before_step;
  // Distributed: joins every step's vote (online re-placement), on the stepping thread.
  StepParticipant* participant = nullptr;
  // Adds to the metrics after each step, on the stepping thread, under the metrics lock.
  std::function<void(WorkerMetrics*)> add_metrics;
};

class EngineWorker {
 public:
  // One process: starts the stepping thread. Distributed: the caller must call Run().
  explicit EngineWorker(Engine& engine, EngineWorkerOptions options = {});
  ~EngineWorker();  // Shutdown()
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Distributed only: steps on the calling thread until every rank was asked to stop (or a
  // collective failed: its error). Returns at once in one process.
  Status Run();

  // Queues the request; events go to `stream`. Errors: the engine's (InvalidArgument), or
  // Unavailable after shutdown began or when the stepping thread does not answer in `timeout`.
  StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestStream> stream,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // The request ends with FinishReason::kCancelled at the next step; unknown ids are ignored.
  // `count_as` is the reason the metrics count it under (kStop when a stop string ended it).
  void Cancel(RequestId id, FinishReason count_as = FinishReason::kCancelled);
  // Stops accepting requests and cancels every request still queued or running.
  void CancelAll();
  // CancelAll, and the stepping loop ends once the cancellations are done (on every rank when
  // distributed). Safe from a signal-watching thread.
  void RequestStop();
  // RequestStop, then joins the stepping thread (one process). Idempotent.
  void Shutdown();
  bool accepting() const;

  WorkerMetrics Metrics() const;

 private:
  struct PendingSubmit;
  // Steps until stopped. An exception out of a step (a bug, or memory running out) is caught
  // here: every request and queued submit gets the error, the worker stops accepting (so the
  // router marks the group down), and the error is returned (and printed, for the in-process
  // thread, whose return value nobody reads).
  Status Loop();
  Status LoopSteps();
  Status Abandon(const std::string& error);
  void ApplyQueued(std::vector<std::shared_ptr<PendingSubmit>> submits,
                   std::vector<std::pair<RequestId, FinishReason>> cancels, bool cancel_all);
  void Deliver(std::vector<TokenEvent> events);
  void FailAll(const std::string& error);
  void UpdateMetrics();

  Engine& engine_;
  EngineWorkerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingSubmit>> submits_;        // guarded by mu_
  std::vector<std::pair<RequestId, FinishReason>> cancels_;    // guarded by mu_
  bool cancel_all_ = false, accepting_ = true, stop_ = false;  // guarded by mu_
  WorkerMetrics metrics_;                                      // guarded by mu_
  std::chrono::steady_clock::time_point progress_;  // the last finished step; guarded by mu_
  std::string failure_;  // why the loop stopped on an internal error; guarded by mu_
  // Stepping thread only.
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  std::unordered_map<RequestId, FinishReason> count_as_;  // cancelled requests counted otherwise
  std::vector<float> logits_;
  std::thread thread_;
};

}  // namespace epserve
