#include "io/npy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace epserve {
namespace {

TEST(NpyTest, RoundTrip) {
  std::string path = (std::filesystem::temp_directory_path() / "epserve_npy_test.npy").string();
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(WriteNpyF32(path, {1, 2, 3}, v.data()).ok());
  auto a = ReadNpyF32(path);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(a->data, v);
}

TEST(NpyTest, HugeShapesAreRefusedBeforeAllocating) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "epserve_npy_huge.npy").string();
  // A .npy of `shape` over 24 data bytes (6 floats).
  auto read_with_shape = [&](const std::string& shape) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
    std::string b = std::string("\x93NUMPY\x01\x00", 8);
    b.push_back(static_cast<char>(dict.size() & 0xff));
    b.push_back(static_cast<char>(dict.size() >> 8));
    b += dict + std::string(24, '\0');
    std::ofstream(path, std::ios::binary) << b;
    return ReadNpyF32(path);
  };
  ASSERT_TRUE(read_with_shape("(2, 3)").ok());
  // 2^62 x 4 elements (the product overflows 64 bits), an 18-digit and a 20-digit dimension.
  for (const char* shape :
       {"(4611686018427387904, 4)", "(999999999999999999, 3)", "(99999999999999999999,)"}) {
    const std::string msg = read_with_shape(shape).status().message();
    EXPECT_NE(msg.find("header field 'shape'"), std::string::npos) << shape << ": " << msg;
    EXPECT_NE(msg.find("needs more than the 24 data bytes in the file"), std::string::npos)
        << shape << ": " << msg;
  }
  EXPECT_NE(
      read_with_shape("(2, 2)").status().message().find("gives 16 data bytes, the file has 24"),
      std::string::npos);
}

}  // namespace
}  // namespace epserve
