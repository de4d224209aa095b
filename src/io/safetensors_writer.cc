#include "io/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/output_file.h"

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
  ASSIGN_OR_RETURN(OutputFile f, OutputFile::Create(path));
  uint64_t len = text.size();
  RETURN_IF_ERROR(f.Write(&len, 8));
  RETURN_IF_ERROR(f.Write(text));
  for (const auto& [name, e] : entries_) RETURN_IF_ERROR(f.Write(e.bytes.data(), e.bytes.size()));
  return f.Commit();
}

}  // namespace epserve
