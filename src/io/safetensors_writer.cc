#include "io/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace epserve {

void SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  CHECK(static_cast<size_t>(n) * DTypeSize(dtype) == bytes.size()) << name;
  total_bytes_ += bytes.size();
  entries_[name] = Entry{dtype, std::move(shape), std::move(bytes)};
}

std::vector<std::string> SafetensorsWriter::Names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : entries_) names.push_back(k);
  return names;
}

Status SafetensorsWriter::Write(const std::string& path) const {
  nlohmann::ordered_json header;
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    header[name] = {{"dtype", DTypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Status::IoError(path + ": cannot create: " + std::strerror(errno));
  uint64_t len = text.size();
  bool ok = std::fwrite(&len, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [name, e] : entries_) {
    if (!ok) break;
    ok = e.bytes.empty() || std::fwrite(e.bytes.data(), 1, e.bytes.size(), f) == e.bytes.size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Status::IoError(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace epserve
