#include "runtime/engine_worker.h"

#include <cstdio>
#include <future>
#include <new>
#include <string>
#include <utility>

#include "base/guarded_thread.h"
#include "grammar/grammar.h"
#include "runtime/compile_slots.h"

namespace epserve {

void RequestStream::Push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

bool RequestStream::Pop(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

struct EngineWorker::PendingSubmit {
  EngineRequest request;
  std::unique_ptr<TokenConstraint> constraint;  // made on the submitting thread
  std::shared_ptr<RequestStream> stream;
  std::promise<StatusOr<RequestId>> result;
};

EngineWorker::EngineWorker(Engine& engine, EngineWorkerOptions options)
    : engine_(engine), options_(options) {
  UpdateMetrics();
  if (!options_.lockstep.distributed())
    thread_ = GuardedThread("the engine loop", [this] { (void)Loop(); });
}

Status EngineWorker::Run() {
  if (!options_.lockstep.distributed()) return Status::Ok();
  return Loop();
}

EngineWorker::~EngineWorker() { Shutdown(); }

StatusOr<RequestId> EngineWorker::Submit(EngineRequest request,
                                         std::shared_ptr<RequestStream> stream,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto refusal = [this]() -> Status {
    if (!options_.lockstep.leader())
      return Status::Unavailable("not a DP group leader: requests go to TP rank 0");
    if (!accepting_)
      return Status::Unavailable(failure_.empty() ? "the server is shutting down" : failure_);
    return Status::Ok();
  };
  {
    // Checked before compiling too, so a refused request does not take a compile slot.
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(refusal());
  }
  auto pending = std::make_shared<PendingSubmit>();
  if (!request.constraint.empty()) {
    // The grammar compiles here, in one of the process's compile slots, never on the stepping
    // thread (a schema or tool list may take seconds).
    StatusOr<std::unique_ptr<TokenConstraint>> made = Status::Internal("not made");
    RETURN_IF_ERROR(
        CompileSlots::Process().Run([&] { made = engine_.MakeConstraint(request); }, timeout));
    if (!made.ok()) return made.status();
    pending->constraint = std::move(*made);
    timeout = std::max(std::chrono::milliseconds(1),
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           deadline - std::chrono::steady_clock::now()));
  }
  pending->request = std::move(request);
  pending->stream = stream;
  std::future<StatusOr<RequestId>> result = pending->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(refusal());
    submits_.push_back(std::move(pending));
  }
  cv_.notify_all();
  if (result.wait_for(timeout) != std::future_status::ready) {
    stream->Abandon();  // if it is admitted later, the engine thread cancels it
    return Status::Unavailable("the engine did not accept the request in time");
  }
  return result.get();
}

void EngineWorker::Cancel(RequestId id, FinishReason count_as) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.emplace_back(id, count_as);
  }
  cv_.notify_all();
}

void EngineWorker::CancelAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    cancel_all_ = true;
  }
  cv_.notify_all();
}

void EngineWorker::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    cancel_all_ = true;
    stop_ = true;
  }
  cv_.notify_all();
}

void EngineWorker::Shutdown() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

bool EngineWorker::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

WorkerMetrics EngineWorker::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerMetrics m = metrics_;
  const grammar::GrammarCacheStats cache = grammar::GrammarCacheStatistics();
  m.grammar_cache_bytes = static_cast<int64_t>(cache.bytes);
  m.grammar_cache_entries = static_cast<int64_t>(cache.entries);
  m.grammar_compile_seconds = CompileSlots::Process().stats().seconds;
  if (m.num_running + m.num_waiting > 0 || !submits_.empty())
    m.stalled_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - progress_)
                       .count();
  return m;
}

Status EngineWorker::Loop() {
  try {
    return LoopSteps();
  } catch (const std::bad_alloc&) {
    return Abandon("internal error in the engine loop: out of memory");
  } catch (const std::exception& e) {
    return Abandon(std::string("internal error in the engine loop: ") + e.what());
  } catch (...) {
    return Abandon("internal error in the engine loop: an unknown exception");
  }
}

Status EngineWorker::Abandon(const std::string& error) {
  std::fprintf(stderr, "epserve: %s\n", error.c_str());
  std::vector<std::shared_ptr<PendingSubmit>> submits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    failure_ = error;
    submits.swap(submits_);
  }
  for (auto& p : submits) p->result.set_value(Status::Unavailable(error));
  try {
    FailAll(error);
  } catch (...) {
    // The engine's state is unknown after the exception; the waiters still get their error
    // through the streams FailAll reached before it threw, and the rest time out (bounded).
  }
  return Status::Internal(error);
}

Status EngineWorker::LoopSteps() {
  const Lockstep& ls = options_.lockstep;
  const bool distributed = ls.distributed(), leader = ls.leader();
  bool idle = false;
  for (;;) {
    std::vector<std::shared_ptr<PendingSubmit>> submits;
    std::vector<std::pair<RequestId, FinishReason>> cancels;
    bool cancel_all = false, stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] {
        return stop_ || cancel_all_ || !submits_.empty() || !cancels_.empty() || engine_.HasWork();
      };
      if (!distributed)
        cv_.wait(lock, ready);
      else if (idle)
        cv_.wait_for(lock, options_.idle_poll, ready);
      submits.swap(submits_);
      cancels.swap(cancels_);
      cancel_all = cancel_all_;
      cancel_all_ = false;
      stop = stop_;
    }
    if (leader) ApplyQueued(std::move(submits), std::move(cancels), cancel_all);
    StepPlan plan;
    StepVote vote{.active = 0, .stop = stop ? 1 : 0};
    if (leader) {
      plan = engine_.Schedule();
      vote.active = (!plan.chunks.empty() || engine_.HasWork()) ? 1 : 0;
    }
    if (options_.participant != nullptr) options_.participant->Vote(&vote);
    if (Status st = AgreeStep(ls, &vote); !st.ok()) {
      FailAll("the engine world failed: " + st.message());
      return st;
    }
    if (vote.active != 0 && options_.participant != nullptr) {
      if (Status st = options_.participant->AfterVote(vote); !st.ok()) {
        FailAll("the engine world failed: " + st.message());
        return st;
      }
    }
    if (vote.stop != 0 && !stop) RequestStop();  // another rank was asked: cancel ours too
    if (vote.active == 0) {
      if (leader) Deliver(engine_.Complete(plan, logits_));  // this step's cancellations
      UpdateMetrics();
      if (vote.stop != 0) {
        FailAll("the server shut down");  // nothing should be left; never leave a waiter hanging
        return Status::Ok();
      }
      idle = true;
      continue;
    }
    idle = false;
    if (options_.before_step) options_.before_step();
    if (Status st = RunStepPlan(ls, engine_.model(), &plan, engine_.pool().blocks(), &logits_);
        !st.ok()) {
      FailAll(st.message());
      if (distributed) return st;  // the ranks are out of step: nothing more can run
      continue;
    }
    if (leader) Deliver(engine_.Complete(plan, logits_));
    if (Status st = RunDrafts(ls, engine_, &logits_); !st.ok()) {
      FailAll(st.message());
      if (distributed) return st;
      continue;
    }
    UpdateMetrics();
  }
}

void EngineWorker::ApplyQueued(std::vector<std::shared_ptr<PendingSubmit>> submits,
                               std::vector<std::pair<RequestId, FinishReason>> cancels,
                               bool cancel_all) {
  for (auto& p : submits) {
    StatusOr<RequestId> id = engine_.Submit(std::move(p->request), std::move(p->constraint));
    if (id.ok()) streams_[*id] = p->stream;
    p->result.set_value(std::move(id));
  }
  for (const auto& [id, count_as] : cancels) {
    if (!streams_.count(id)) continue;  // finished already
    engine_.Cancel(id);
    if (count_as != FinishReason::kCancelled) count_as_[id] = count_as;
  }
  for (auto& [id, stream] : streams_)
    if (cancel_all || stream->abandoned()) engine_.Cancel(id);
}

void EngineWorker::Deliver(std::vector<TokenEvent> events) {
  // Counters first, so a reader that saw a request's last event sees it counted.
  int64_t generated = 0;
  std::map<std::string, int64_t> finished;
  for (const TokenEvent& ev : events) {
    if (ev.token >= 0) ++generated;
    if (ev.finish == FinishReason::kNone) continue;
    auto as = count_as_.find(ev.request);
    const bool counted_otherwise = as != count_as_.end() && ev.finish == FinishReason::kCancelled;
    ++finished[FinishReasonName(counted_otherwise ? as->second : ev.finish)];
    if (as != count_as_.end()) count_as_.erase(as);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.generation_tokens += generated;
    for (auto& [reason, n] : finished) metrics_.finished[reason] += n;
  }
  UpdateMetrics();
  for (TokenEvent& ev : events) {
    auto it = streams_.find(ev.request);
    if (it == streams_.end()) continue;
    const bool last = ev.finish != FinishReason::kNone;
    it->second->Push(std::move(ev));
    if (last) streams_.erase(it);
  }
}

// After a failed step the engine's state is unknown: every open request ends with an error.
void EngineWorker::FailAll(const std::string& error) {
  for (auto& [id, stream] : streams_) {
    engine_.Cancel(id);
    stream->Push(
        {.request = id, .finish = FinishReason::kError, .error = error, .retryable = true});
  }
  if (!streams_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.finished["error"] += static_cast<int64_t>(streams_.size());
  }
  streams_.clear();
  count_as_.clear();
}

void EngineWorker::UpdateMetrics() {
  const EngineStats& st = engine_.stats();
  const KvBlockPool& pool = engine_.pool();
  std::lock_guard<std::mutex> lock(mu_);
  progress_ = std::chrono::steady_clock::now();
  metrics_.num_running = engine_.num_running();
  metrics_.num_waiting = engine_.num_waiting();
  metrics_.kv_blocks_total = pool.num_blocks();
  metrics_.kv_blocks_used = pool.num_referenced();
  metrics_.prompt_tokens = st.prompt_tokens;
  metrics_.prefix_cache_queries = st.prompt_tokens;
  metrics_.prefix_cache_hits = st.cached_prompt_tokens;
  metrics_.spec_draft_tokens = st.draft_tokens;
  metrics_.spec_accepted_tokens = st.accepted_draft_tokens;
  if (options_.add_metrics) options_.add_metrics(&metrics_);
}

}  // namespace epserve
