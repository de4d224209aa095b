#include "io/npy.h"

#include <gtest/gtest.h>

#include <filesystem>

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

}  // namespace
}  // namespace epserve
