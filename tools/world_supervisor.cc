#include "tools/world_supervisor.h"

#include <csignal>
#include <cstdio>

#include "base/guarded_thread.h"

namespace epserve::tools {

namespace {

std::string ExitText(int status) {
  return status >= 0 ? "status " + std::to_string(status) : "signal " + std::to_string(-status);
}

}  // namespace

StatusOr<std::unique_ptr<WorldSupervisor>> WorldSupervisor::Start(WorldSupervisorOptions options) {
  std::unique_ptr<WorldSupervisor> s(new WorldSupervisor(std::move(options)));
  ASSIGN_OR_RETURN(std::unique_ptr<EngineWorld> world, EngineWorld::Start(s->options_.argv));
  s->world_ = std::move(world);
  ASSIGN_OR_RETURN(s->first_addresses_,
                   s->world_->WaitForGroups(s->options_.num_groups, s->options_.startup_timeout));
  s->world_ready_ = true;
  return s;
}

WorldSupervisor::~WorldSupervisor() { Stop(); }

void WorldSupervisor::Supervise(serve::GroupRouter* router,
                                std::vector<rpc::GrpcEngineGroup*> groups,
                                std::function<void()> on_restart) {
  router_ = router;
  groups_ = std::move(groups);
  on_restart_ = std::move(on_restart);
  healing_ = options_.max_restarts_per_minute > 0;
  thread_ = GuardedThread("the engine world supervisor", [this] { Loop(); });
}

void WorldSupervisor::Stop(std::chrono::milliseconds grace) {
  std::shared_ptr<EngineWorld> world;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    world = world_;
  }
  healing_ = false;
  cv_.notify_all();
  // Stopping the world first also ends a restart's wait for its groups.
  if (world) world->Stop(grace);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (world_ && world_ != world) world_->Stop(grace);
}

Status WorldSupervisor::RequestReplacement() {
  std::shared_ptr<EngineWorld> world;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status::Unavailable("the engine world is stopping");
    // A world still starting may have ranks that cannot take the signal yet.
    if (!world_ready_) return Status::Unavailable("the engine world is restarting");
    world = world_;
  }
  if (router_ != nullptr && router_->num_up() < router_->num_groups())
    return Status::Unavailable(std::to_string(router_->num_groups() - router_->num_up()) + " of " +
                               std::to_string(router_->num_groups()) +
                               " engine groups are down; try again once every group is up");
  return world->Signal(SIGUSR2);
}

bool WorldSupervisor::SleepUnlessStopped(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stop_; });
}

std::string WorldSupervisor::CheckWorld(std::chrono::steady_clock::time_point now) {
  std::shared_ptr<EngineWorld> world;
  {
    std::lock_guard<std::mutex> lock(mu_);
    world = world_;
  }
  int status = 0;
  if (world->Exited(&status)) return "the engine world exited (" + ExitText(status) + ")";
  const int up = router_->num_up();
  if (up == router_->num_groups()) {
    down_since_.reset();
    return "";
  }
  if (!down_since_) down_since_ = now;
  if (now - *down_since_ < options_.down_timeout) return "";
  char why[128];
  std::snprintf(why, sizeof(why), "%d of %d groups down for %.1f s while the world runs",
                router_->num_groups() - up, router_->num_groups(),
                std::chrono::duration<double>(now - *down_since_).count());
  return why;
}

void WorldSupervisor::Loop() {
  const auto world_started = std::chrono::steady_clock::now();
  auto started = world_started;
  while (SleepUnlessStopped(std::chrono::milliseconds(100))) {
    const auto now = std::chrono::steady_clock::now();
    const std::string why = CheckWorld(now);
    if (why.empty()) {
      // A world that has run 10 s without trouble resets the backoff (only a crash loop, a
      // world dying as soon as it is up, backs off).
      if (now - started > std::chrono::seconds(10)) failed_starts_ = 0;
      continue;
    }
    while (!recent_.empty() && now - recent_.front() > std::chrono::minutes(1)) recent_.pop_front();
    if (static_cast<int>(recent_.size()) >= options_.max_restarts_per_minute) {
      std::fprintf(stderr,
                   "epserve: %s; not restarting it (%d restarts in the last minute, "
                   "--max-restarts-per-minute %d): requests get 503 until serve is restarted\n",
                   why.c_str(), static_cast<int>(recent_.size()), options_.max_restarts_per_minute);
      healing_ = false;
      // This thread stays until Stop: a world it started gets SIGTERM when it ends
      // (PR_SET_PDEATHSIG follows the thread that forked).
      while (SleepUnlessStopped(std::chrono::seconds(1))) {
      }
      return;
    }
    Restart(why);
    started = std::chrono::steady_clock::now();
  }
}

void WorldSupervisor::Restart(const std::string& why) {
  const auto t0 = std::chrono::steady_clock::now();
  recent_.push_back(t0);
  // Backoff: none for the first failure, then 1, 2, 4 ... 30 s while worlds keep failing
  // (a start that fails, or a world that dies within 10 s of starting).
  const auto backoff = failed_starts_ == 0
                           ? std::chrono::milliseconds(0)
                           : std::chrono::milliseconds(std::min<int64_t>(
                                 30000, int64_t{1000} << std::min(failed_starts_ - 1, 5)));
  std::fprintf(
      stderr, "epserve: %s; restarting it (restart %d%s)\n", why.c_str(),
      restarts_total_.load() + 1,
      backoff.count() > 0 ? (", after " + std::to_string(backoff.count()) + " ms").c_str() : "");
  std::shared_ptr<EngineWorld> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = world_;
    world_ready_ = false;
  }
  old->Stop(std::chrono::seconds(3));
  // Every group of the old world is gone: end their streams now (the sessions resume them).
  for (size_t g = 0; g < groups_.size(); ++g)
    router_->ReportFailure(static_cast<int>(g), "the engine world is restarting");
  if (!SleepUnlessStopped(backoff)) return;
  ++failed_starts_;
  StatusOr<std::unique_ptr<EngineWorld>> started = EngineWorld::Start(options_.argv);
  if (!started.ok()) {
    std::fprintf(stderr, "epserve: restarting the engine world failed: %s\n",
                 started.status().message().c_str());
    return;  // the next check finds the old world exited and tries again
  }
  std::shared_ptr<EngineWorld> world(std::move(*started));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      world->Stop(std::chrono::seconds(3));
      return;
    }
    world_ = world;
  }
  StatusOr<std::vector<std::string>> addresses =
      world->WaitForGroups(options_.num_groups, options_.startup_timeout);
  if (!addresses.ok()) {
    std::fprintf(stderr, "epserve: the restarted engine world did not come up: %s\n",
                 addresses.status().message().c_str());
    world->Stop(std::chrono::seconds(3));  // the next check restarts it again
    return;
  }
  for (size_t g = 0; g < groups_.size() && g < addresses->size(); ++g)
    groups_[g]->SetAddress((*addresses)[g]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    world_ready_ = true;
  }
  down_since_.reset();  // failed_starts_ stays: only 10 s of health resets the backoff
  ++restarts_total_;
  if (on_restart_) on_restart_();
  std::fprintf(stderr, "epserve: the engine world is back after %.1f s (restart %d)\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               restarts_total_.load());
}

}  // namespace epserve::tools
