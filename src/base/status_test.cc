#include "base/status.h"

#include <gtest/gtest.h>

namespace epserve {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(StatusTest, PropagatesFirstError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status st = Quarter(6, &out);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "odd: 3");
  EXPECT_EQ(st.WithContext("file.json").message(), "file.json: odd: 3");
}

}  // namespace
}  // namespace epserve
