// A read-only memory-mapped file. Owns the mapping; views into it live as long as it does.
// Thread safety: immutable after Open; safe to read from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace epserve {

class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Maps the pages of [data, data + bytes) of a file mapping into the page table now (reading
// them from disk if they are not cached), so the first decode steps do not pay a page fault
// per 4 KB of weights. Uses madvise(MADV_POPULATE_READ) (Linux 5.14+), else reads one byte
// per page. Only the process's page table changes; the data are not copied.
void PrefaultPages(const void* data, size_t bytes);

}  // namespace epserve
