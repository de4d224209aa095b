// WorldSupervisor: keeps the engine world of `epserve serve --np N` alive (issue 40, "a
// deployment heals itself"). It starts the world, then watches it and the router's groups:
// when the world exits (a rank died, so mpirun ended the job) or a group stays down for
// `down_timeout` while the world still runs (a stopped or stuck rank), it stops what is left
// of the world, waits a backoff, starts a new one, and points the gRPC groups at the new
// leaders' addresses. The router's health checks then find the groups up again, and the
// requests the failure interrupted, which wait in their sessions (CompletionSession's resume),
// go on where they stopped. At most `max_restarts_per_minute` restarts in any minute; beyond
// that it gives up (requests get 503, as without supervision) and says so.
// Thread safety: Start/Supervise/Stop from one thread; the supervision runs on its own;
// RequestReplacement from any.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "rpc/engine_client.h"
#include "serve/group_router.h"
#include "tools/engine_world.h"

namespace epserve::tools {

struct WorldSupervisorOptions {
  std::vector<std::string> argv;  // the mpirun command line of the world
  int num_groups = 1;             // DP groups whose leaders print their addresses
  std::chrono::seconds startup_timeout{600};
  // A group down this long while the world runs: the world is restarted.
  std::chrono::milliseconds down_timeout{30000};
  int max_restarts_per_minute = 3;  // 0: never restart
};

class WorldSupervisor {
 public:
  // Starts the world and waits for its groups' addresses (the first start: its errors are the
  // caller's, nothing is retried).
  static StatusOr<std::unique_ptr<WorldSupervisor>> Start(WorldSupervisorOptions options);
  ~WorldSupervisor();  // Stop()

  const std::vector<std::string>& addresses() const { return first_addresses_; }
  // Starts watching; `groups[g]` is the router's group g. `on_restart` runs after each restart
  // that brought every group's leader back.
  void Supervise(serve::GroupRouter* router, std::vector<rpc::GrpcEngineGroup*> groups,
                 std::function<void()> on_restart);
  // Ends the supervision and the world (SIGTERM, then SIGKILL after `grace`). Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  int restarts() const { return restarts_total_; }
  // Whether a world that fails is restarted (supervising, and not given up).
  bool healing() const { return healing_; }
  // Asks the running world to re-place its experts (a world started with --replace-every):
  // SIGUSR2 to mpirun, which forwards it to every rank; the ranks gather, place and switch over
  // their next steps with traffic (runtime/online_placer.h). Errors (Unavailable): the world
  // is stopping, has exited, is restarting (its groups have not all listened) or has a group
  // down. Any thread, after Supervise.
  Status RequestReplacement();

 private:
  explicit WorldSupervisor(WorldSupervisorOptions options) : options_(std::move(options)) {}
  void Loop();
  // Why the world needs a restart now, or "".
  std::string CheckWorld(std::chrono::steady_clock::time_point now);
  void Restart(const std::string& why);
  bool SleepUnlessStopped(std::chrono::milliseconds d);  // false: stopping

  WorldSupervisorOptions options_;
  std::vector<std::string> first_addresses_;
  serve::GroupRouter* router_ = nullptr;
  std::vector<rpc::GrpcEngineGroup*> groups_;
  std::function<void()> on_restart_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<EngineWorld> world_;  // guarded by mu_ (swapped by restarts)
  bool stop_ = false;                   // guarded by mu_
  bool world_ready_ = false;            // guarded by mu_: world_'s groups have all listened
  std::thread thread_;
  // Supervision thread only.
  std::deque<std::chrono::steady_clock::time_point> recent_;  // restarts in the last minute
  std::optional<std::chrono::steady_clock::time_point> down_since_;
  int failed_starts_ = 0;  // in a row: sets the backoff
  std::atomic<int> restarts_total_{0};
  std::atomic<bool> healing_{false};
};

}  // namespace epserve::tools
