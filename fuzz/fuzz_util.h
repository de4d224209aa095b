// Helpers shared by the fuzz targets (docs/testing.md, "Fuzzing").
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace epserve::fuzz {

// A file holding the current input, for parsers that only read from a path. One per process
// and name (so concurrent fuzzing jobs do not share it), in $TMPDIR (default /tmp); rewritten
// for every input and removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/epserve-fuzz-" +
            std::to_string(getpid()) + "-" + name;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with `bytes`; aborts if that fails (a broken harness, not a
  // finding in the parser).
  const std::string& Write(std::string_view bytes) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
        std::fclose(f) != 0) {
      std::perror(path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits `*rest` at the first NUL: returns what precedes it and leaves what follows in `*rest`
// (all of it, and an empty `*rest`, when there is no NUL). Lets one input carry several parts.
inline std::string_view TakePart(std::string_view* rest) {
  size_t nul = rest->find('\0');
  std::string_view part = rest->substr(0, nul);
  *rest = nul == std::string_view::npos ? std::string_view() : rest->substr(nul + 1);
  return part;
}

}  // namespace epserve::fuzz
