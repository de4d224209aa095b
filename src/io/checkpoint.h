// A Hugging Face checkpoint directory: config.json plus either one model.safetensors or
// shards listed by model.safetensors.index.json ({"weight_map": {tensor: file}}, each file one of
// the directory's own: a name with a '/' is refused). Used for V2/V3 (model/weights.h) and V4
// (model/v4/v4_weights.h) checkpoints alike; the dtypes are io/safetensors.h's.
// All shards are memory-mapped; TensorInfo::data points into the mappings, which live as long
// as the Checkpoint. Thread safety: immutable after Open.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"

namespace epserve {

class Checkpoint {
 public:
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_text() const { return config_text_; }
  std::string config_path() const { return dir_ + "/config.json"; }
  // The file that lists the tensors: model.safetensors or model.safetensors.index.json.
  const std::string& listing_path() const { return listing_path_; }
  // nullptr when absent.
  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, const TensorInfo*>& tensors() const { return tensors_; }

 private:
  std::string dir_;
  std::string config_text_;
  std::string listing_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> tensors_;
};

// Reads a whole small text file.
StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace epserve
