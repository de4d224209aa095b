#include "io/npy.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <regex>

#include "base/output_file.h"
#include "io/checkpoint.h"

namespace epserve {

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    n *= shape[i];
  }
  dict += "), }";
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  ASSIGN_OR_RETURN(OutputFile f, OutputFile::Create(path));
  const char magic[] = "\x93NUMPY\x01\x00";
  uint16_t hlen = static_cast<uint16_t>(dict.size());
  RETURN_IF_ERROR(f.Write(magic, 8));
  RETURN_IF_ERROR(f.Write(&hlen, 2));
  RETURN_IF_ERROR(f.Write(dict));
  RETURN_IF_ERROR(f.Write(data, static_cast<size_t>(n) * 4));
  return f.Commit();
}

StatusOr<NpyArray> ReadNpyF32(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadTextFile(path));
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    return Status::DataLoss(path + ": not a .npy file");
  uint16_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 2);
  if (bytes[6] != 1 || 10u + hlen > bytes.size())
    return Status::DataLoss(path + ": unsupported .npy header");
  std::string dict = bytes.substr(10, hlen);
  if (dict.find("'<f4'") == std::string::npos ||
      dict.find("'fortran_order': False") == std::string::npos)
    return Status::DataLoss(path + ": want little-endian float32 in C order");
  std::smatch m;
  if (!std::regex_search(dict, m, std::regex("'shape': \\(([0-9, ]*)\\)")))
    return Status::DataLoss(path + ": no shape");
  NpyArray arr;
  // The shape is bounded by the file before anything is allocated: every product of dimensions
  // stays within the elements the data bytes hold, so nothing overflows.
  const uint64_t data_bytes = bytes.size() - 10 - hlen, max_elements = data_bytes / 4;
  uint64_t n = 1;
  std::string s = m[1];
  const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator();
       ++it) {
    const std::string dim = it->str();
    const uint64_t v = dim.size() > 18 ? UINT64_MAX : std::stoull(dim);
    if (v > max_elements || (v != 0 && n > max_elements / v))
      return Status::DataLoss(path + ": header field 'shape' (" + s + ") needs more than the " +
                              std::to_string(data_bytes) + " data bytes in the file");
    arr.shape.push_back(static_cast<int64_t>(v));
    n *= v;
  }
  if (n * 4 != data_bytes)
    return Status::DataLoss(path + ": header field 'shape' (" + s + ") gives " +
                            std::to_string(n * 4) + " data bytes, the file has " +
                            std::to_string(data_bytes));
  arr.data.resize(n);
  std::memcpy(arr.data.data(), bytes.data() + 10 + hlen, n * 4);
  return arr;
}

}  // namespace epserve
