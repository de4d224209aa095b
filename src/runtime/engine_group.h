// EngineGroup: one DP group's engine as the request router (serve/group_router.h) sees it.
// Two kinds: LocalEngineGroup, an EngineWorker in this process (`epserve serve` with one
// group), and rpc::GrpcEngineGroup, the leader of a group in an `epserve engine` world behind
// the gRPC engine service. The router needs nothing else from a group, which is what lets one
// scheduler drive in-process and remote engines alike.
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/engine_worker.h"

namespace epserve {

class EngineGroup {
 public:
  virtual ~EngineGroup() = default;
  virtual std::string name() const = 0;  // names the group in errors and logs
  // Queues the request; its events go to `stream`. Errors: InvalidArgument when the request
  // itself is bad (it would be on any group); Unavailable when this group cannot take it now
  // (down, shutting down, no answer in `timeout`), so another group may.
  // A group that fails after accepting ends the stream with a kError event marked
  // `retryable` (the group failed, not the request: it may run again elsewhere).
  virtual StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestStream> stream,
                                     std::chrono::milliseconds timeout) = 0;
  virtual void Cancel(RequestId id, FinishReason count_as) = 0;
  // The engine's counters; an error when it does not answer within `timeout` (the health
  // check) or is shutting down.
  virtual StatusOr<WorkerMetrics> Load(std::chrono::milliseconds timeout) = 0;
  // The router found the group down: end its open requests now (each stream gets a kError
  // event, retryable) instead of leaving them to time out.
  virtual void Abort(const std::string& why) { (void)why; }
};

class LocalEngineGroup : public EngineGroup {
 public:
  explicit LocalEngineGroup(EngineWorker& worker, std::string name = "group 0")
      : worker_(worker), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  StatusOr<RequestId> Submit(EngineRequest request, std::shared_ptr<RequestStream> stream,
                             std::chrono::milliseconds timeout) override {
    return worker_.Submit(std::move(request), std::move(stream), timeout);
  }
  void Cancel(RequestId id, FinishReason count_as) override { worker_.Cancel(id, count_as); }
  StatusOr<WorkerMetrics> Load(std::chrono::milliseconds) override {
    if (!worker_.accepting()) return Status::Unavailable(name_ + " is shutting down");
    return worker_.Metrics();
  }

 private:
  EngineWorker& worker_;
  std::string name_;
};

}  // namespace epserve
