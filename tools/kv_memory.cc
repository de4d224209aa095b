// ParseKvMemory (tools/command.h): the --kv-memory value of `generate` and `serve`.
#include <fstream>

#include "tools/command.h"

namespace epserve::tools {

namespace {

// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
int64_t AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

StatusOr<int64_t> ParseKvMemory(const std::string& text) { return ParseKvMemory(text, -1); }

StatusOr<int64_t> ParseKvMemory(const std::string& text, int64_t available) {
  const Status bad = Status::InvalidArgument("--kv-memory: \"" + text +
                                             "\" is not a size (e.g. 512M, 2G) or a percentage");
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad;
  }
  const std::string unit = text.substr(used);
  if (unit == "%") {
    if (v <= 0 || v > 100)
      return Status::InvalidArgument("--kv-memory: \"" + text +
                                     "\" is not a percentage in (0, 100]");
    const int64_t avail = available >= 0 ? available : AvailableMemory();
    if (avail == 0)
      return Status::InvalidArgument("--kv-memory " + text +
                                     ": /proc/meminfo has no MemAvailable; give bytes");
    return static_cast<int64_t>(avail * v / 100);
  }
  const double mul = unit.empty() || unit == "B" ? 1
                     : unit == "K"               ? 1024.0
                     : unit == "M"               ? 1024.0 * 1024
                     : unit == "G"               ? 1024.0 * 1024 * 1024
                                                 : -1;
  if (mul < 0 || v <= 0) return bad;
  return static_cast<int64_t>(v * mul);
}

}  // namespace epserve::tools
