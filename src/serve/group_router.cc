#include "serve/group_router.h"

#include <cstdio>

#include "base/guarded_thread.h"

namespace epserve::serve {

StatusOr<std::unique_ptr<GroupRouter>> GroupRouter::Create(
    std::vector<std::unique_ptr<EngineGroup>> groups, GroupRouterOptions options) {
  if (groups.empty()) return Status::InvalidArgument("no engine group to route to");
  ASSIGN_OR_RETURN(auto policy,
                   RoutingPolicy::Create(static_cast<int>(groups.size()), options.routing));
  return std::unique_ptr<GroupRouter>(
      new GroupRouter(std::move(groups), options, std::move(policy)));
}

GroupRouter::GroupRouter(std::vector<std::unique_ptr<EngineGroup>> groups,
                         GroupRouterOptions options, std::unique_ptr<RoutingPolicy> policy)
    : groups_(std::move(groups)),
      options_(options),
      policy_(std::move(policy)),
      up_(groups_.size(), false),
      in_flight_(groups_.size(), 0),
      finished_(groups_.size()),
      loads_(groups_.size()),
      last_error_(groups_.size()),
      downs_(groups_.size(), 0) {
  health_ = GuardedThread("the group health checker", [this] { HealthLoop(); });
}

GroupRouter::~GroupRouter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
}

void GroupRouter::HealthLoop() {
  for (;;) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      int64_t downs_before;
      {
        std::lock_guard<std::mutex> lock(mu_);
        downs_before = downs_[g];
      }
      StatusOr<WorkerMetrics> load = groups_[g]->Load(options_.health_timeout);
      if (load.ok() && options_.stall_timeout.count() > 0 &&
          load->stalled_ms > options_.stall_timeout.count()) {
        char why[160];
        std::snprintf(why, sizeof(why),
                      "no step finished for %.1f s with %d requests running and %d waiting",
                      load->stalled_ms / 1000.0, load->num_running, load->num_waiting);
        load = Status::Unavailable(groups_[g]->name() + ": " + why);
      }
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      if (!load.ok()) last_error_[g] = load.status().message();
      if (load.ok()) {
        loads_[g] = *load;
        if (!up_[g] && downs_[g] == downs_before) {
          up_[g] = true;
          std::fprintf(stderr, "epserve: %s is up\n", groups_[g]->name().c_str());
        }
        cv_.notify_all();
      } else if (up_[g]) {
        lock.unlock();
        MarkDown(static_cast<int>(g), load.status().message());
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, options_.health_interval, [this] { return stop_; })) return;
  }
}

void GroupRouter::MarkDown(int g, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!up_[g]) return;
    up_[g] = false;
    ++downs_[g];
  }
  std::fprintf(stderr, "epserve: %s is down: %s\n", groups_[g]->name().c_str(), why.c_str());
  policy_->ForgetGroup(g);  // whatever it comes back with, its cache is not to be counted on
  groups_[g]->Abort(groups_[g]->name() + " is down: " + why);
}

void GroupRouter::CountRetry() {
  std::lock_guard<std::mutex> lock(mu_);
  ++retries_;
}

void GroupRouter::ReportFailure(int group, const std::string& why) {
  if (group >= 0 && group < num_groups()) MarkDown(group, why);
}

Status GroupRouter::WaitUntilUp(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_up = [this] {
    for (bool u : up_)
      if (!u) return false;
    return true;
  };
  if (cv_.wait_for(lock, timeout, all_up)) return Status::Ok();
  std::string down;
  for (size_t g = 0; g < up_.size(); ++g)
    if (!up_[g])
      // The check's error names the group already ("group 0 (host:port): ...").
      down += (down.empty() ? "" : ", ") +
              (last_error_[g].empty() ? groups_[g]->name() : last_error_[g]);
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%.1f", timeout.count() / 1000.0);
  return Status::Unavailable(std::string("not up after ") + waited + " s: " + down);
}

StatusOr<RoutedRequest> GroupRouter::Submit(const EngineRequest& request,
                                            std::shared_ptr<RequestStream> stream, int exclude,
                                            int prefer) {
  std::vector<bool> tried(groups_.size(), false);
  if (exclude >= 0 && exclude < num_groups()) {
    tried[exclude] = true;
    std::lock_guard<std::mutex> lock(mu_);
    ++retries_;  // a request its first group lost
  }
  std::string last_error;
  for (;;) {
    std::vector<bool> usable(groups_.size());
    RouteDecision d;
    {
      // The choice and its count in one step: a burst of requests arriving together sees each
      // other's choices (counted only once accepted, 150 at once all went to group 0).
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t g = 0; g < groups_.size(); ++g) usable[g] = up_[g] && !tried[g];
      if (prefer >= 0 && prefer < num_groups() && usable[prefer])
        d = {.group = prefer, .reason = RouteReason::kSibling};
      else
        d = policy_->Choose(request.prompt, in_flight_, usable);
      if (d.group >= 0) ++in_flight_[d.group];
    }
    if (d.group < 0) {
      if (last_error.empty()) return Status::Unavailable("no engine group is up");
      return Status::Unavailable("no engine group took the request; last: " + last_error);
    }
    StatusOr<RequestId> id = groups_[d.group]->Submit(request, stream, options_.submit_timeout);
    if (id.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ++decisions_[RouteReasonName(d.reason)];
      return RoutedRequest{.group = d.group, .id = *id};
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_[d.group];
    }
    if (id.status().code() != StatusCode::kUnavailable) return id.status();
    last_error = id.status().message();
    tried[d.group] = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++retries_;
    }
    MarkDown(d.group, last_error);
  }
}

void GroupRouter::Cancel(const RoutedRequest& r, FinishReason count_as) {
  if (r.group >= 0 && r.group < num_groups()) groups_[r.group]->Cancel(r.id, count_as);
}

void GroupRouter::Finished(const RoutedRequest& r, FinishReason reason) {
  if (r.group < 0 || r.group >= num_groups()) return;
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_[r.group];
  ++finished_[r.group][FinishReasonName(reason)];
}

int GroupRouter::num_up() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (bool u : up_) n += u ? 1 : 0;
  return n;
}

RouterMetrics GroupRouter::Metrics(bool refresh) {
  if (refresh) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!up_[g]) continue;
      }
      StatusOr<WorkerMetrics> load = groups_[g]->Load(options_.health_timeout);
      std::lock_guard<std::mutex> lock(mu_);
      if (load.ok()) loads_[g] = *load;
    }
  }
  RouterMetrics m;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t g = 0; g < groups_.size(); ++g)
    m.groups.push_back({.name = groups_[g]->name(),
                        .up = up_[g],
                        .in_flight = in_flight_[g],
                        .finished = finished_[g],
                        .load = loads_[g],
                        .tree_tokens = policy_->tree_tokens(static_cast<int>(g))});
  m.decisions = decisions_;
  m.retries = retries_;
  return m;
}

}  // namespace epserve::serve
