// Helpers for model tests: synthetic checkpoints in temp folders and rewriting them with one
// tensor changed (to test validation).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace epserve::testing {

inline std::string TempDir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("epserve_model_test_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

inline std::string MakeTiny(const std::string& name, const std::string& preset = "tiny",
                            WeightDType dtype = WeightDType::kBF16) {
  std::string dir = TempDir(name);
  auto config = PresetConfig(preset);
  Status st = WriteSyntheticCheckpoint(
      {.out_dir = dir, .config = config.value(), .dtype = dtype, .seed = 1});
  CHECK(st.ok()) << st.message();
  return dir;
}

// A checkpoint opened, its config parsed and its weights loaded (CHECK-fails on error).
struct Loaded {
  std::unique_ptr<Checkpoint> ck;
  ModelConfig config;
  std::unique_ptr<ModelWeights> w;
};
inline Loaded Load(const std::string& dir,
                   LoadOptions::Requant requant = LoadOptions::Requant::kNone) {
  Loaded l;
  l.ck = std::move(Checkpoint::Open(dir).value());
  l.config = ModelConfig::Parse(l.ck->config_text(), "config.json").value();
  l.w = std::move(ModelWeights::Load(*l.ck, l.config, {.requant = requant}).value());
  return l;
}

// n token ids of a deterministic prompt (ids below 1000, every tiny preset's vocabulary).
inline std::vector<int32_t> Prompt(int n, int start) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((start + 37 * i) % 1000);
  return p;
}

// Rewrites dir/model.safetensors, letting `edit` drop (return false) or change each tensor.
struct EditableTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
inline void RewriteCheckpoint(const std::string& dir,
                              const std::function<bool(EditableTensor&)>& edit,
                              const std::vector<EditableTensor>& extra = {}) {
  const std::string path = dir + "/model.safetensors";
  SafetensorsWriter w;
  {
    auto f = SafetensorsFile::Open(path);
    CHECK(f.ok());
    for (const auto& [name, t] : (*f)->tensors()) {
      EditableTensor e{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.num_bytes)};
      if (edit(e)) w.Add(e.name, e.dtype, e.shape, std::move(e.bytes));
    }
  }
  for (const auto& e : extra) w.Add(e.name, e.dtype, e.shape, e.bytes);
  CHECK(w.Write(path).ok());
}

}  // namespace epserve::testing
