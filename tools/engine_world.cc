#include "tools/engine_world.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <regex>

#include "base/guarded_thread.h"

namespace epserve::tools {

StatusOr<std::unique_ptr<EngineWorld>> EngineWorld::Start(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::IoError(std::string("pipe: ") + strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::IoError(std::string("fork: ") + strerror(errno));
  if (pid == 0) {  // the child: async-signal-safe calls only until exec
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    signal(SIGPIPE, SIG_DFL);
    execvp(args[0], args.data());
    const char msg[] = "epserve: cannot run the engine launcher\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<EngineWorld> w(new EngineWorld());
  w->pid_ = pid;
  const int fd = fds[0];
  w->reader_ = GuardedThread("the engine output reader", [p = w.get(), fd] { p->ReadOutput(fd); });
  return w;
}

EngineWorld::~EngineWorld() {
  Stop();
  if (reader_.joinable()) reader_.join();
}

void EngineWorld::ReadOutput(int fd) {
  static const std::regex kListening(
      R"(^epserve engine: group (\d+) of \d+ \(.*\) listening on (\S+)$)");
  FILE* in = fdopen(fd, "r");
  char buf[4096];
  while (in != nullptr && std::fgets(buf, sizeof(buf), in) != nullptr) {
    std::fputs(buf, stderr);
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    std::smatch m;
    if (std::regex_match(line, m, kListening)) {
      std::lock_guard<std::mutex> lock(mu_);
      addresses_[std::stoi(m[1])] = m[2];
      cv_.notify_all();
    }
  }
  if (in != nullptr) std::fclose(in);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

bool EngineWorld::Reap(bool block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (exited_) return true;
  }
  int status = 0;
  const pid_t r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r != pid_) {  // still running, or another thread reaped it just now
    std::lock_guard<std::mutex> lock(mu_);
    return exited_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  exited_ = true;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  cv_.notify_all();
  return true;
}

bool EngineWorld::Exited(int* status) {
  if (!Reap(false)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (status != nullptr) *status = exit_status_;
  return true;
}

StatusOr<std::vector<std::string>> EngineWorld::WaitForGroups(int groups,
                                                              std::chrono::seconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  auto next_report = start + std::chrono::seconds(10);
  for (;;) {
    int status = 0;
    const bool gone = Exited(&status);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (static_cast<int>(addresses_.size()) >= groups) {
        std::vector<std::string> out;
        for (int g = 0; g < groups; ++g) {
          auto it = addresses_.find(g);
          if (it == addresses_.end())
            return Status::Internal("no address from engine group " + std::to_string(g));
          out.push_back(it->second);
        }
        return out;
      }
      if (gone)
        return Status::Unavailable("the engine world exited (" +
                                   (status >= 0 ? "status " + std::to_string(status)
                                                : "signal " + std::to_string(-status)) +
                                   ") before every group listened; its output is above");
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - start > timeout)
      return Status::Unavailable("engine groups not listening after " +
                                 std::to_string(timeout.count()) + " s");
    if (now > next_report) {
      std::lock_guard<std::mutex> lock(mu_);
      std::fprintf(stderr, "epserve: waiting for the engine world: %d of %d groups listening\n",
                   static_cast<int>(addresses_.size()), groups);
      next_report = now + std::chrono::seconds(10);
    }
  }
}

Status EngineWorld::Signal(int sig) {
  int status = 0;
  if (Exited(&status))
    return Status::Unavailable(
        "the engine world exited (" +
        (status >= 0 ? "status " + std::to_string(status) : "signal " + std::to_string(-status)) +
        ")");
  if (kill(pid_, sig) != 0)
    return Status::IoError("signal " + std::to_string(sig) +
                           " to the engine world's launcher: " + strerror(errno));
  return Status::Ok();
}

void EngineWorld::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return;
  if (!Exited()) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!Exited() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!Exited()) {
      std::fprintf(stderr, "epserve: the engine world did not stop in %lld ms; killing it\n",
                   static_cast<long long>(grace.count()));
      kill(-pid_, SIGKILL);
      Reap(true);
    }
  }
  // Ranks the launcher left behind (it died first, or exited before them): the rest of its
  // process group, asked to stop, then killed after 2 s. None must outlive the world.
  if (kill(-pid_, SIGTERM) != 0) return;  // ESRCH: nothing left
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (kill(-pid_, 0) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(-pid_, SIGKILL);
}

}  // namespace epserve::tools
