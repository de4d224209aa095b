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

TEST(StatusTest, WithContextOnceDoesNotRepeatAPrefix) {
  Status st = Status::Unavailable("rank 0: timed out");
  EXPECT_EQ(st.WithContextOnce("rank 0").message(), "rank 0: timed out");
  EXPECT_EQ(st.WithContextOnce("rank 1").message(), "rank 1: rank 0: timed out");
  EXPECT_EQ(Status::Unavailable("rank 10: x").WithContextOnce("rank 1").message(),
            "rank 1: rank 10: x");
  EXPECT_TRUE(Status::Ok().WithContextOnce("rank 0").ok());
}

}  // namespace
}  // namespace epserve
