#include "io/safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/json.h"

namespace epserve {

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile(std::move(mapped)));
  RETURN_IF_ERROR(f->ParseHeader());
  return f;
}

Status SafetensorsFile::ParseHeader() {
  const std::string& path = file_->path();
  const size_t size = file_->size();
  if (size < 8)
    return Status::DataLoss(path + ": truncated file: " + std::to_string(size) +
                            " bytes, no header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_->data(), 8);  // little-endian on every supported host
  if (header_len > size - 8) {
    return Status::DataLoss(path + ": truncated file: header length " + std::to_string(header_len) +
                            " exceeds the " + std::to_string(size - 8) + " bytes after it");
  }
  const char* hdr = reinterpret_cast<const char*>(file_->data() + 8);
  // Positions are within the header, which starts at byte 8.
  ASSIGN_OR_RETURN(nlohmann::json j,
                   ParseJson(std::string_view(hdr, header_len), path + ": bad header JSON"));
  if (!j.is_object()) return Status::DataLoss(path + ": bad header JSON (not an object)");
  const uint8_t* data_start = file_->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor " + it.key();
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets"))
      return Status::DataLoss(where + ": header entry lacks dtype/shape/data_offsets");
    TensorInfo t;
    t.name = it.key();
    t.file = path;
    if (!e["dtype"].is_string() || !ParseDType(e["dtype"].get<std::string>(), &t.dtype))
      return Status::DataLoss(where + ": unsupported dtype " + e["dtype"].dump() +
                              " (want F32, BF16, F8_E4M3, F8_E8M0, I8, I32 or I64)");
    if (!e["shape"].is_array()) return Status::DataLoss(where + ": shape is not an array");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return Status::DataLoss(where + ": bad shape " + e["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      return Status::DataLoss(where + ": data_offsets must be two non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    if (b > en || en > data_size) {
      return Status::DataLoss(where + ": data_offsets [" + std::to_string(b) + ", " +
                              std::to_string(en) + "] out of range (data section has " +
                              std::to_string(data_size) + " bytes; truncated file?)");
    }
    // Elements and bytes in 64 bits: a shape whose product wraps must not pass for a small one.
    uint64_t want = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (__builtin_mul_overflow(want, static_cast<uint64_t>(d), &want)) {
        return Status::DataLoss(where + ": shape " + t.ShapeString() + " of " + DTypeName(t.dtype) +
                                " is too large (its size overflows 64 bits)");
      }
    }
    if (en - b != want) {
      return Status::DataLoss(where + ": " + std::to_string(en - b) + " bytes for " +
                              DTypeName(t.dtype) + " " + t.ShapeString() + " (want " +
                              std::to_string(want) + ")");
    }
    t.data = data_start + b;
    t.num_bytes = en - b;
    tensors_.emplace(t.name, std::move(t));
  }
  return Status::Ok();
}

}  // namespace epserve
