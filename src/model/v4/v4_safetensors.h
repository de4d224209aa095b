// A V4 checkpoint directory's tensors, by name. DeepSeek-V4 stores dtypes the shared reader
// (io/safetensors.h, which another change is extending) does not take yet: F8_E8M0 scales, I8
// packed FP4 experts, I64 hash tables. This reader maps the files with io/mapped_file.h and keeps
// each tensor's dtype as its safetensors spelling; the header is validated as strictly
// (offsets inside the file, byte count = dtype size x shape), naming file and tensor.
// Thread safety: immutable after Open; the mappings live as long as the object.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/mapped_file.h"

namespace epserve::v4 {

struct V4Tensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", "I64", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // not necessarily aligned
  size_t num_bytes = 0;
  std::string file;

  int64_t NumElements() const;
  std::string ShapeString() const;
};

class V4Checkpoint {
 public:
  // config.json plus model.safetensors or model.safetensors.index.json's shards.
  static StatusOr<std::unique_ptr<V4Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_text() const { return config_text_; }
  // nullptr when absent.
  const V4Tensor* Find(const std::string& name) const;
  const std::map<std::string, V4Tensor>& tensors() const { return tensors_; }

 private:
  Status AddFile(const std::string& path);
  std::string dir_;
  std::string config_text_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, V4Tensor> tensors_;
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace epserve::v4
