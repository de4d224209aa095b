// EngineWorld: the `epserve engine` world that `epserve serve --np N` starts through mpirun.
// The child runs in its own process group (so a terminal's Ctrl-C reaches the scheduler, which
// drains requests before it stops the engines) and dies with the scheduler (PR_SET_PDEATHSIG).
// Its output goes through a pipe: every line is echoed to the scheduler's stderr, and each
// group leader's "listening on HOST:PORT" line (tools/cmd_engine.cc) gives that group's address,
// which works across machines without a shared file system.
// Thread safety: addresses()/WaitForGroups/Exited/Signal may be called from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"

namespace epserve::tools {

class EngineWorld {
 public:
  // argv[0] is looked up on PATH.
  static StatusOr<std::unique_ptr<EngineWorld>> Start(const std::vector<std::string>& argv);
  ~EngineWorld();  // Stop()

  // Waits until `groups` leaders have printed their address, printing progress every 10 s.
  // Errors: the world exited first (its exit status), or the timeout.
  StatusOr<std::vector<std::string>> WaitForGroups(int groups, std::chrono::seconds timeout);
  // Whether the world has exited; *status: its exit code or -signal.
  bool Exited(int* status = nullptr);
  // Sends `sig` to the launcher; Open MPI's mpirun forwards SIGUSR1 and SIGUSR2 to every rank,
  // on every machine. Errors: the world has exited.
  Status Signal(int sig);
  // SIGTERM to the world, then SIGKILL to its process group after `grace`. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  pid_t pid() const { return pid_; }

 private:
  EngineWorld() = default;
  void ReadOutput(int fd);
  bool Reap(bool block);

  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::string> addresses_;  // group -> host:port (guarded by mu_)
  bool exited_ = false;                   // guarded by mu_
  int exit_status_ = 0;                   // guarded by mu_
};

}  // namespace epserve::tools
