#include "common/status.h"

#include <gtest/gtest.h>

#include <string>

namespace sidelock {
namespace {

StatusOr<int> half(int v) {
  if (v % 2 != 0) return invalidArgument("odd");
  return v / 2;
}

Status chain(int v) {
  SIDELOCK_RETURN_IF_ERROR(half(v).status());
  return Status::ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::ok().isOk());
  Status s = unavailable("redis down");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.toString(), "unavailable: redis down");
}

TEST(StatusTest, StatusOrCarriesValueOrError) {
  auto ok = half(4);
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(*ok, 2);
  auto bad = half(3);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(chain(3).isOk());
}

}  // namespace
}  // namespace sidelock
