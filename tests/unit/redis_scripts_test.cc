// Pure logic of the redis layer: key and channel names, reply decoding, reconnect backoff.
#include <gtest/gtest.h>

#include "redis/redis_node.h"
#include "redis/scripts.h"
#include "redis_value_builders.h"

namespace sidelock::backend {
namespace {

TEST(RedisKeys, PrefixAndHashTag) {
  EXPECT_EQ(lockKey("sidelock:", "orders-42"), "sidelock:{orders-42}");
  EXPECT_EQ(tokenKey("sidelock:", "orders-42"), "sidelock:{orders-42}:token");
  EXPECT_EQ(releaseChannel("sidelock:", "orders-42"), "sidelock:released:{orders-42}");
  std::string name;
  ASSERT_TRUE(lockNameFromChannel("sidelock:", "sidelock:released:{orders-42}", &name));
  EXPECT_EQ(name, "orders-42");
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "other:released:{x}", &name));
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "sidelock:released:{x", &name));
  EXPECT_FALSE(lockNameFromChannel("sidelock:", "sidelock:", &name));
  // A lock key ends with '}', a counter key with ":token": no name's lock key is another's counter.
  EXPECT_NE(lockKey("p:", "a}:token"), tokenKey("p:", "a"));
}

TEST(RedisScripts, EveryScriptHasText) {
  for (ScriptId id : kAllScripts) {
    EXPECT_FALSE(scriptText(id).empty()) << scriptName(id);
  }
}

TEST(RedisReplies, Acquire) {
  auto granted = decodeAcquire(array({integer(1), integer(7), integer(5000)}), "n");
  ASSERT_TRUE(granted.isOk());
  EXPECT_TRUE(granted->granted);
  EXPECT_EQ(granted->token, 7u);
  EXPECT_EQ(granted->validity_ms, 5000);
  // A counter seeded from Redis TIME in microseconds: well above 2^32, exact below 2^53.
  auto seeded =
      decodeAcquire(array({integer(1), integer(1'795'376'077'464'695), integer(5000)}), "n");
  ASSERT_TRUE(seeded.isOk());
  EXPECT_EQ(seeded->token, 1'795'376'077'464'695u);
  EXPECT_FALSE(decodeAcquire(array({integer(1), integer(0), integer(5000)}), "n").isOk())
      << "a grant always carries a token";

  auto busy = decodeAcquire(array({integer(0), integer(0), integer(1234)}), "n");
  ASSERT_TRUE(busy.isOk());
  EXPECT_FALSE(busy->granted);
  EXPECT_EQ(busy->holder_ttl_ms, 1234);
  auto no_expiry = decodeAcquire(array({integer(0), integer(0), integer(-1)}), "n");
  EXPECT_EQ(no_expiry->holder_ttl_ms, -1);

  auto err = decodeAcquire(error("WRONGTYPE bad"), "n1");
  ASSERT_FALSE(err.isOk());
  EXPECT_EQ(err.status().code(), StatusCode::kInternal);
  EXPECT_NE(err.status().message().find("WRONGTYPE"), std::string::npos);
  EXPECT_FALSE(decodeAcquire(array({integer(1)}), "n").isOk());
  EXPECT_FALSE(decodeAcquire(str("x"), "n").isOk());

  auto down = decodeAcquire(StatusOr<RedisValue>(unavailable("down")), "n");
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
}

TEST(RedisScripts, TokenCounterOutlivesTheLongestLeaseByTheMargin) {
  EXPECT_EQ(tokenCounterTtlMs(600'000), 600'000 + kTokenCounterMarginMs);
  EXPECT_EQ(tokenCounterTtlMs(0), kTokenCounterMarginMs);
  EXPECT_FALSE(scriptText(ScriptId::kTokenSync).empty());
}

TEST(RedisReplies, ReleaseAndExtend) {
  EXPECT_EQ(*decodeRelease(integer(1), "n"), OwnerCheck::kOk);
  EXPECT_EQ(*decodeRelease(integer(0), "n"), OwnerCheck::kNotOwner);
  EXPECT_EQ(*decodeRelease(integer(-1), "n"), OwnerCheck::kNotHeld);
  EXPECT_FALSE(decodeRelease(integer(2), "n").isOk());
  EXPECT_FALSE(decodeRelease(str("1"), "n").isOk());

  auto ok = decodeExtend(array({integer(1), integer(900)}), "n");
  EXPECT_EQ(ok->result, OwnerCheck::kOk);
  EXPECT_EQ(ok->validity_ms, 900);
  EXPECT_EQ(decodeExtend(array({integer(0), integer(5)}), "n")->result, OwnerCheck::kNotOwner);
  EXPECT_EQ(decodeExtend(array({integer(-1), integer(-2)}), "n")->result, OwnerCheck::kNotHeld);
  EXPECT_FALSE(decodeExtend(integer(1), "n").isOk());
  auto timeout = decodeExtend(StatusOr<RedisValue>(deadlineExceeded("slow")), "n");
  EXPECT_EQ(timeout.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(RedisReplies, Inspect) {
  auto held = decodeInspect(array({integer(1), integer(800), str("12")}), "n");
  ASSERT_TRUE(held.isOk());
  EXPECT_TRUE(held->held);
  EXPECT_EQ(held->ttl_ms, 800);
  EXPECT_EQ(held->token, 12u);
  // Lua truncates a table at a nil: never-granted locks give a two-element array.
  auto never = decodeInspect(array({integer(0), integer(-2)}), "n");
  ASSERT_TRUE(never.isOk());
  EXPECT_FALSE(never->held);
  EXPECT_EQ(never->ttl_ms, 0);
  EXPECT_EQ(never->token, 0u);
  RedisValue nil;
  auto with_nil = decodeInspect(array({integer(0), integer(-2), nil}), "n");
  EXPECT_EQ(with_nil->token, 0u);
  EXPECT_FALSE(decodeInspect(array({str("x"), integer(1)}), "n").isOk());
}

TEST(RedisBackoff, GrowsDoublesAndCapsWithJitter) {
  for (int i = 0; i < 200; ++i) {
    const int64_t d0 = reconnectDelayMs(0, 100, 5000);
    EXPECT_GE(d0, 50);
    EXPECT_LE(d0, 100);
    const int64_t d3 = reconnectDelayMs(3, 100, 5000);
    EXPECT_GE(d3, 400);
    EXPECT_LE(d3, 800);
    const int64_t big = reconnectDelayMs(1000, 100, 5000);  // no overflow
    EXPECT_GE(big, 2500);
    EXPECT_LE(big, 5000);
  }
  EXPECT_GE(reconnectDelayMs(0, 0, 0), 1);
}

}  // namespace
}  // namespace sidelock::backend
