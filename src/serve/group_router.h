// GroupRouter: the request scheduler's core. It holds every DP group of the deployment (an
// EngineGroup each: in this process or behind the gRPC engine service), picks a group for each
// request with the RoutingPolicy (serve/routing_policy.h: round robin, least load, or
// cache-aware over an approximate prefix tree), submits it there, and keeps each group's health:
// a background thread asks every group for its Load every `health_interval`; a group that fails
// to answer within `health_timeout`, or answers but has made no progress for `stall_timeout`,
// is marked down (its open streams are ended, its prefix entries forgotten), and up again once
// it answers (and moves). A submission a group refuses as unavailable
// is retried on another up group; none up: Unavailable (the HTTP layer answers 503).
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "runtime/engine_group.h"
#include "serve/routing_policy.h"

namespace epserve::serve {

struct GroupRouterOptions {
  RoutingOptions routing;
  std::chrono::milliseconds health_interval{500};
  std::chrono::milliseconds health_timeout{1000};
  std::chrono::milliseconds submit_timeout{30000};
  // A group that answers its health check but has finished no step for this long while
  // requests wait (WorkerMetrics::stalled_ms: a stopped or stuck rank) is down until it
  // moves again: its streams are ended (and resumed elsewhere by the sessions). 0: never.
  std::chrono::milliseconds stall_timeout{0};
};

struct RoutedRequest {
  int group = -1;
  RequestId id = 0;
};

// A snapshot for /metrics.
struct RouterMetrics {
  struct Group {
    std::string name;
    bool up = false;
    int64_t in_flight = 0;  // this router's requests not yet finished
    // This router's finished requests by the finish reason their client was given
    // (FinishReasonName). The engine's own count (load.finished) can differ: a stop string
    // found in the last tokens ends a request the engine already finished by length.
    std::map<std::string, int64_t> finished;
    WorkerMetrics load;  // the last Load answer
    int64_t tree_tokens = 0;
  };
  std::vector<Group> groups;
  std::map<std::string, int64_t> decisions;  // RouteReasonName -> requests
  int64_t retries = 0;  // submissions moved to another group (refused, or lost before a token)
};

class GroupRouter {
 public:
  // Marks every group down until its first health answer (WaitUntilUp), starts the health thread.
  static StatusOr<std::unique_ptr<GroupRouter>> Create(
      std::vector<std::unique_ptr<EngineGroup>> groups, GroupRouterOptions options);
  ~GroupRouter();  // stops the health thread

  // Waits until every group is up, or `timeout` (the error names the groups still down).
  Status WaitUntilUp(std::chrono::milliseconds timeout);

  // Routes and submits; on success the request counts as in flight until Finished. `exclude`:
  // a group not to use (a retry after it failed); `prefer`: the group to use while it is up
  // (the other choices of a request with n > 1 go where the first one cached the prompt).
  // Errors: InvalidArgument (the request is bad), Unavailable (no group up, or every up group
  // refused it).
  StatusOr<RoutedRequest> Submit(const EngineRequest& request,
                                 std::shared_ptr<RequestStream> stream, int exclude = -1,
                                 int prefer = -1);
  void Cancel(const RoutedRequest& r, FinishReason count_as);
  // The request's last event arrived (or it was abandoned): `reason` is what its client was told.
  void Finished(const RoutedRequest& r, FinishReason reason);
  // A group failed under a request: mark it down now rather than at the next health check.
  void ReportFailure(int group, const std::string& why);
  // A request its group lost runs again (router_retries_total).
  void CountRetry();

  int num_groups() const { return static_cast<int>(groups_.size()); }
  int num_up() const;
  // refresh: ask every up group for its Load now (a scrape), else the health check's answers.
  RouterMetrics Metrics(bool refresh = false);
  const RoutingPolicy& policy() const { return *policy_; }

 private:
  GroupRouter(std::vector<std::unique_ptr<EngineGroup>> groups, GroupRouterOptions options,
              std::unique_ptr<RoutingPolicy> policy);
  void HealthLoop();
  void MarkDown(int g, const std::string& why);

  std::vector<std::unique_ptr<EngineGroup>> groups_;
  GroupRouterOptions options_;
  std::unique_ptr<RoutingPolicy> policy_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> up_;                                  // guarded by mu_
  std::vector<int64_t> in_flight_;                        // guarded by mu_
  std::vector<std::map<std::string, int64_t>> finished_;  // guarded by mu_
  std::vector<WorkerMetrics> loads_;                      // guarded by mu_
  std::vector<std::string> last_error_;  // guarded by mu_: why a group's last check failed
  // guarded by mu_: times each group was marked down. A health check's success counts only if
  // no failure came between its start and its answer (else a check begun before a group died
  // would mark it up again).
  std::vector<int64_t> downs_;
  std::map<std::string, int64_t> decisions_;  // guarded by mu_
  int64_t retries_ = 0;                       // guarded by mu_
  bool stop_ = false;                         // guarded by mu_
  std::thread health_;
};

}  // namespace epserve::serve
