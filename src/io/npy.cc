#include "io/npy.h"

#include <cerrno>
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
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return Status::DataLoss(path + ": not a .npy file");
  uint16_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 2);
  if (bytes[6] != 1 || 10u + hlen > bytes.size()) return Status::DataLoss(path + ": unsupported .npy header");
  std::string dict = bytes.substr(10, hlen);
  if (dict.find("'<f4'") == std::string::npos || dict.find("'fortran_order': False") == std::string::npos)
    return Status::DataLoss(path + ": want little-endian float32 in C order");
  std::smatch m;
  if (!std::regex_search(dict, m, std::regex("'shape': \\(([0-9, ]*)\\)"))) return Status::DataLoss(path + ": no shape");
  NpyArray arr;
  int64_t n = 1;
  std::string s = m[1];
  const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), number); it != std::sregex_iterator(); ++it) {
    arr.shape.push_back(std::stoll(it->str()));
    n *= arr.shape.back();
  }
  if (10u + hlen + static_cast<size_t>(n) * 4 != bytes.size()) return Status::DataLoss(path + ": size does not match shape");
  arr.data.resize(n);
  std::memcpy(arr.data.data(), bytes.data() + 10 + hlen, n * 4);
  return arr;
}

}  // namespace epserve
