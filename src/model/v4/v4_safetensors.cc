#include "model/v4/v4_safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace epserve::v4 {

namespace {

int64_t ElementBytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "BF16" || dtype == "F16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F8_E4M3" || dtype == "F8_E5M2" || dtype == "F8_E8M0" || dtype == "I8" ||
      dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int64_t V4Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string V4Tensor::ShapeString() const { return ShapeToString(shape); }

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

const V4Tensor* V4Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status V4Checkpoint::AddFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const uint8_t* base = file->data();
  const uint64_t size = file->size();
  uint64_t header_len = 0;
  if (size < 8) return Status::DataLoss(path + ": too short for a safetensors header");
  std::memcpy(&header_len, base, 8);
  if (header_len > size - 8)
    return Status::DataLoss(path + ": header length " + std::to_string(header_len) +
                            " exceeds the file");
  auto j = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss(path + ": header is not a JSON object");
  const uint8_t* data_start = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor " + it.key();
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets") || !e["dtype"].is_string() || !e["shape"].is_array())
      return Status::DataLoss(where + ": header entry lacks dtype/shape/data_offsets");
    V4Tensor t;
    t.name = it.key();
    t.file = path;
    t.dtype = e["dtype"].get<std::string>();
    const int64_t elem = ElementBytes(t.dtype);
    if (elem == 0) return Status::DataLoss(where + ": unsupported dtype " + t.dtype);
    uint64_t want = static_cast<uint64_t>(elem);
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return Status::DataLoss(where + ": bad shape " + e["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(want, d.get<uint64_t>(), &want))
        return Status::DataLoss(where + ": shape " + e["shape"].dump() + " is too large");
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      return Status::DataLoss(where + ": data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > data_size)
      return Status::DataLoss(where + ": data_offsets out of range (truncated file?)");
    if (en - b != want)
      return Status::DataLoss(where + ": " + std::to_string(en - b) + " bytes for " + t.dtype +
                              " " + t.ShapeString() + " (want " + std::to_string(want) + ")");
    t.data = data_start + b;
    t.num_bytes = en - b;
    if (tensors_.count(t.name)) return Status::DataLoss(where + ": stored twice");
    tensors_.emplace(t.name, std::move(t));
  }
  files_.push_back(std::move(file));
  return Status::Ok();
}

StatusOr<std::unique_ptr<V4Checkpoint>> V4Checkpoint::Open(const std::string& dir) {
  auto ck = std::unique_ptr<V4Checkpoint>(new V4Checkpoint());
  ck->dir_ = dir;
  ASSIGN_OR_RETURN(ck->config_text_, ReadText(dir + "/config.json"));
  const std::string index_path = dir + "/model.safetensors.index.json";
  auto index = ReadText(index_path);
  if (!index.ok()) {
    RETURN_IF_ERROR(ck->AddFile(dir + "/model.safetensors"));
    return ck;
  }
  auto j = nlohmann::json::parse(*index, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    return Status::DataLoss(index_path + ": no weight_map object");
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      return Status::DataLoss(index_path + ": bad file for tensor " + name);
    files.insert(file.get<std::string>());
  }
  for (const auto& f : files) RETURN_IF_ERROR(ck->AddFile(dir + "/" + f));
  return ck;
}

}  // namespace epserve::v4
