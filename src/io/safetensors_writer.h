// Writes a safetensors file: tensors are buffered, then Write() emits the header (sorted by
// name, padded with spaces to a multiple of 8 bytes so every tensor starts 8-byte aligned)
// followed by the data. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace epserve {

class SafetensorsWriter {
 public:
  // bytes.size() must equal product(shape) * DTypeSize(dtype).
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t total_bytes() const { return total_bytes_; }
  std::vector<std::string> Names() const;
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  size_t total_bytes_ = 0;
};

}  // namespace epserve
