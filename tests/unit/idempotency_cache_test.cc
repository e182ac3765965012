// IdempotencyCache: answers by (route, name, request_id) within a window, bounded in size.
#include "api/idempotency_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace sidelock::api {
namespace {

TEST(IdempotencyCacheTest, RemembersWithinTheWindowPerRouteNameAndId) {
  IdempotencyCache cache(/*window_ms=*/1000, /*max_entries=*/10);
  cache.store("acquire", "orders-1", "r1", {200, "grant", {}, "", 0}, 0);
  const auto* hit = cache.find("acquire", "orders-1", "r1", 999'000);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->status, 200);
  EXPECT_EQ(hit->body, "grant");
  EXPECT_EQ(cache.find("release", "orders-1", "r1", 0), nullptr) << "another route";
  EXPECT_EQ(cache.find("acquire", "orders-2", "r1", 0), nullptr) << "another lock";
  EXPECT_EQ(cache.find("acquire", "orders-1", "r2", 0), nullptr) << "another request";
  cache.erase("acquire", "orders-1", "r1");
  EXPECT_EQ(cache.find("acquire", "orders-1", "r1", 0), nullptr) << "erased";
  cache.store("acquire", "orders-1", "r1", {200, "grant", {}, "", 0}, 0);
  EXPECT_EQ(cache.find("acquire", "orders-1", "r1", 1'000'000), nullptr) << "window over";
  EXPECT_EQ(cache.size(), 0u) << "expired entries are dropped";
}

TEST(IdempotencyCacheTest, KeepsAtMostMaxEntriesDroppingTheOldest) {
  IdempotencyCache cache(60'000, 3);
  for (int i = 0; i < 5; ++i)
    cache.store("release", "x", std::to_string(i), {404, "", {}, "", 0}, i);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find("release", "x", "0", 10), nullptr);
  EXPECT_EQ(cache.find("release", "x", "1", 10), nullptr);
  EXPECT_NE(cache.find("release", "x", "4", 10), nullptr);
  // Storing a key again keeps the newest answer and its later expiry.
  cache.store("release", "x", "4", {200, "again", {}, "", 0}, 20);
  EXPECT_EQ(cache.find("release", "x", "4", 30)->body, "again");
}

TEST(IdempotencyCacheTest, WindowZeroRemembersNothing) {
  IdempotencyCache cache(0, 10);
  cache.store("acquire", "x", "r", {200, "grant", {}, "", 0}, 0);
  EXPECT_EQ(cache.find("acquire", "x", "r", 0), nullptr);
}

}  // namespace
}  // namespace sidelock::api
