// Durable output files: what a command writes either appears whole under its name or not at
// all. Bytes go to `<path>.tmp.<pid>` beside the target, are fsynced, and the temporary is
// renamed over `path` only when every write, the fsync and the close succeeded; on any failure
// the temporary is removed and the error names `path` and the errno text.
//
// A `path` that already exists and is not a regular file (/dev/null, /dev/full, /dev/stdout, a
// FIFO) is written in place instead: renaming over a device would replace it. Write errors there
// (ENOSPC from /dev/full) are still reported.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace epserve {

// Writes `bytes` to `path` as described above.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// The streaming form, for outputs produced piece by piece (trace records, tensors). Nothing is
// visible under `path` until Commit succeeds; destroying an uncommitted file removes the
// temporary. After the first failed Write, later Writes do nothing and return that error.
// Thread safety: one thread at a time. Movable, not copyable.
class OutputFile {
 public:
  // Creates the temporary (or opens a non-regular `path` for writing).
  static StatusOr<OutputFile> Create(const std::string& path);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();

  Status Write(const void* data, size_t size);
  Status Write(std::string_view bytes) { return Write(bytes.data(), bytes.size()); }
  // Flushes, fsyncs, closes and renames over the target. REQUIRES: not yet committed.
  Status Commit();

  const std::string& path() const { return path_; }

 private:
  OutputFile() = default;
  void Discard();                                  // closes and removes the temporary, if any
  Status WriteRaw(const char* data, size_t size);  // straight to the file descriptor
  Status Flush();

  std::string path_;
  std::string temp_path_;  // empty when writing in place
  int fd_ = -1;
  std::string buffer_;
  Status status_;
};

// Refuses an output that is one of the inputs: "--out x.json is also an input (--trace); write
// elsewhere". Paths that exist are compared with std::filesystem::equivalent (so links and
// different spellings of one file match), others by their lexically normal absolute form.
// Empty paths are ignored.
Status CheckNotSameFile(std::string_view output_flag, const std::string& output,
                        std::string_view input_flag, const std::vector<std::string>& inputs);

// Checks, before any work, that `path` could be written: not a folder, its folder exists and
// is writable (or it is an existing device or file this process may write). So a typo in an
// output path fails at once, not after a long run: "--tokens-out out/t.txt: the folder out
// does not exist". Writing can still fail later (a full disk); that is reported then. Empty
// paths are ignored.
Status CheckWritable(std::string_view output_flag, const std::string& path);

}  // namespace epserve
