// Reader for the safetensors format (docs/checkpoint-format.md):
//   u64 little-endian N | N bytes of JSON header | data section
// header: {"<name>": {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]}, ...,
//          "__metadata__": {...}}  with offsets relative to the start of the data section.
// Open validates the whole header (JSON, dtypes, shapes, offsets inside the file, sizes that
// match dtype x shape) and names the file and tensor in every error. dtypes: F32, BF16, F8_E4M3
// and DeepSeek-V4's F8_E8M0 (UE8M0 scales), I8 (packed FP4 bytes) and I64 / I32 (index tables);
// a TensorInfo's dtype is the file's storage type, which its loader interprets (tensor/dtype.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/mapped_file.h"
#include "tensor/dtype.h"

namespace epserve {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping of `file`
  size_t num_bytes = 0;
  std::string file;  // path of the file holding it

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::string ShapeString() const;
};

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::string& path() const { return file_->path(); }

 private:
  explicit SafetensorsFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}
  Status ParseHeader();
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace epserve
