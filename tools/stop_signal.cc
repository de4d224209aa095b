#include "tools/stop_signal.h"

#include <atomic>
#include <csignal>

namespace epserve::tools {
namespace {

std::atomic<int> g_stop_signal{0};
void OnStopSignal(int sig) { g_stop_signal = sig; }

}  // namespace

void InstallStopSignalHandler(bool restart) {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

int StopSignal() { return g_stop_signal.load(); }

}  // namespace epserve::tools
