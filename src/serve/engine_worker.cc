#include "serve/engine_worker.h"

#include <future>
#include <utility>

namespace epserve::serve {

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
  std::shared_ptr<RequestStream> stream;
  std::promise<StatusOr<RequestId>> result;
};

EngineWorker::EngineWorker(Engine& engine) : engine_(engine) {
  UpdateMetrics();
  thread_ = std::thread([this] { Loop(); });
}

EngineWorker::~EngineWorker() { Shutdown(); }

StatusOr<RequestId> EngineWorker::Submit(EngineRequest request,
                                         std::shared_ptr<RequestStream> stream,
                                         std::chrono::milliseconds timeout) {
  auto pending = std::make_shared<PendingSubmit>();
  pending->request = std::move(request);
  pending->stream = stream;
  std::future<StatusOr<RequestId>> result = pending->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return Status::Unavailable("the server is shutting down");
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

void EngineWorker::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    cancel_all_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

WorkerMetrics EngineWorker::Metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void EngineWorker::Loop() {
  for (;;) {
    std::vector<std::shared_ptr<PendingSubmit>> submits;
    std::vector<std::pair<RequestId, FinishReason>> cancels;
    bool cancel_all = false, stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] {
        return stop_ || cancel_all_ || !submits_.empty() || !cancels_.empty() || engine_.HasWork();
      });
      submits.swap(submits_);
      cancels.swap(cancels_);
      cancel_all = cancel_all_;
      cancel_all_ = false;
      stop = stop_;
    }
    ApplyQueued(std::move(submits), std::move(cancels), cancel_all);
    if (engine_.HasWork()) {
      StatusOr<std::vector<TokenEvent>> events = engine_.Step();
      if (events.ok()) {
        Deliver(std::move(*events));
      } else {
        FailAll(events.status().message());
      }
    }
    UpdateMetrics();
    if (stop && !engine_.HasWork()) {
      FailAll("the server shut down");  // nothing should be left; never leave a waiter hanging
      return;
    }
  }
}

void EngineWorker::ApplyQueued(std::vector<std::shared_ptr<PendingSubmit>> submits,
                               std::vector<std::pair<RequestId, FinishReason>> cancels,
                               bool cancel_all) {
  for (auto& p : submits) {
    StatusOr<RequestId> id = engine_.Submit(std::move(p->request));
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
  int64_t generated = 0;
  std::map<std::string, int64_t> finished;
  for (TokenEvent& ev : events) {
    if (ev.token >= 0) ++generated;
    const FinishReason finish = ev.finish;
    if (finish != FinishReason::kNone) {
      auto as = count_as_.find(ev.request);
      const bool counted_otherwise = as != count_as_.end() && finish == FinishReason::kCancelled;
      ++finished[FinishReasonName(counted_otherwise ? as->second : finish)];
      if (as != count_as_.end()) count_as_.erase(as);
    }
    auto it = streams_.find(ev.request);
    if (it == streams_.end()) continue;
    it->second->Push(std::move(ev));
    if (finish != FinishReason::kNone) streams_.erase(it);
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.generation_tokens += generated;
  for (auto& [reason, n] : finished) metrics_.finished[reason] += n;
}

// After a failed step the engine's state is unknown: every open request ends with an error.
void EngineWorker::FailAll(const std::string& error) {
  for (auto& [id, stream] : streams_) {
    engine_.Cancel(id);
    stream->Push({.request = id, .finish = FinishReason::kError, .error = error});
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
  metrics_.num_running = engine_.num_running();
  metrics_.num_waiting = engine_.num_waiting();
  metrics_.kv_cache_usage =
      pool.num_blocks() > 0 ? static_cast<double>(pool.num_referenced()) / pool.num_blocks() : 0;
  metrics_.prompt_tokens = st.prompt_tokens;
  metrics_.prefix_cache_queries = st.prompt_tokens;
  metrics_.prefix_cache_hits = st.cached_prompt_tokens;
}

}  // namespace epserve::serve
