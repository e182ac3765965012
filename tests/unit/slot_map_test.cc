// Hash slots, MOVED / ASK parsing and the slot map built from CLUSTER SLOTS, without a server.
// The expected slots are `CLUSTER KEYSLOT` answers of redis-server 7.0 (the integration test
// cluster_backend_test compares many more against a live node).
#include "redis/slot_map.h"

#include <gtest/gtest.h>

#include "redis/scripts.h"
#include "redis_value_builders.h"

namespace sidelock::backend {
namespace {

TEST(ClusterKeySlotTest, MatchesClusterKeyslot) {
  EXPECT_EQ(clusterKeySlot("foo"), 12182);
  EXPECT_EQ(clusterKeySlot("bar"), 5061);
  EXPECT_EQ(clusterKeySlot("somekey"), 11058);
  EXPECT_EQ(clusterKeySlot("{user1000}.following"), 3443);
  EXPECT_EQ(clusterKeySlot(""), 0);
  EXPECT_EQ(clusterKeySlot("a{}b"), 13694);  // empty tag: the whole key is hashed
  EXPECT_EQ(clusterKeySlot("{}x"), 10595);
  EXPECT_EQ(clusterKeySlot("x{y}{z}"), 12222);  // only the first tag counts
  EXPECT_EQ(clusterKeySlot("sidelock:{a}"), 15495);
  EXPECT_EQ(clusterKeySlot("sidelock:released:{lock-7}"), 14148);
}

TEST(ClusterKeySlotTest, ALocksKeysAndChannelShareOneSlot) {
  for (const char* name : {"a", "orders/42", "lock-7", "x:y"}) {
    const uint16_t slot = clusterKeySlot(lockKey("sidelock:", name));
    EXPECT_EQ(clusterKeySlot(tokenKey("sidelock:", name)), slot) << name;
    EXPECT_EQ(clusterKeySlot(releaseChannel("sidelock:", name)), slot) << name;
  }
}

TEST(ClusterRedirectTest, ParsesMovedAndAsk) {
  ClusterRedirect r;
  ASSERT_TRUE(parseClusterRedirect("MOVED 3999 127.0.0.1:6381", &r));
  EXPECT_EQ(r.kind, ClusterRedirect::Kind::kMoved);
  EXPECT_EQ(r.slot, 3999);
  EXPECT_EQ(r.target.toString(), "127.0.0.1:6381");
  ASSERT_TRUE(parseClusterRedirect("ASK 16383 redis-2.example:7000", &r));
  EXPECT_EQ(r.kind, ClusterRedirect::Kind::kAsk);
  EXPECT_EQ(r.slot, 16383);
  EXPECT_EQ(r.target.host, "redis-2.example");
  EXPECT_EQ(r.target.port, 7000);
  ASSERT_TRUE(parseClusterRedirect("MOVED 1 :6380", &r));  // unknown endpoint: same host
  EXPECT_EQ(r.target.host, "");
  EXPECT_EQ(r.target.port, 6380);
}

TEST(ClusterRedirectTest, RejectsOtherErrors) {
  ClusterRedirect r;
  EXPECT_FALSE(parseClusterRedirect("ERR unknown command", &r));
  EXPECT_FALSE(parseClusterRedirect("MOVED 16384 127.0.0.1:1", &r));  // no such slot
  EXPECT_FALSE(parseClusterRedirect("MOVED x 127.0.0.1:1", &r));
  EXPECT_FALSE(parseClusterRedirect("MOVED 1 127.0.0.1", &r));
  EXPECT_FALSE(parseClusterRedirect("ASK 1 127.0.0.1:99999", &r));
  EXPECT_FALSE(parseClusterRedirect("TRYAGAIN Multiple keys request during rehashing", &r));
}

RedisValue range(int first, int last, std::string host, int port) {
  return array({integer(first), integer(last),
                array({str(std::move(host)), integer(port), str("id")}),
                array({str("10.0.0.9"), integer(9999), str("replica")})});
}

TEST(SlotMapTest, BuildsFromClusterSlots) {
  config::RedisNodeAddress asked{"10.0.0.1", 7000, ""};
  auto map = SlotMap::fromClusterSlots(
      array({range(0, 5460, "10.0.0.1", 7000), range(5461, 10922, "10.0.0.2", 7000),
             range(10923, 16383, "", 7002)}),
      asked);
  ASSERT_TRUE(map.isOk()) << map.status().toString();
  EXPECT_EQ(map->assignedSlots(), kClusterSlots);
  EXPECT_EQ(map->masterOf(0)->toString(), "10.0.0.1:7000");
  EXPECT_EQ(map->masterOf(5461)->toString(), "10.0.0.2:7000");
  EXPECT_EQ(map->masterOf(16383)->toString(), "10.0.0.1:7002");  // no endpoint: the asked host
  ASSERT_EQ(map->masters().size(), 3u);                          // replicas are not masters
}

TEST(SlotMapTest, GapsStayUnassignedAndMovedPatchesOneSlot) {
  config::RedisNodeAddress asked{"127.0.0.1", 7000, ""};
  auto map = SlotMap::fromClusterSlots(array({range(0, 99, "127.0.0.1", 7000)}), asked);
  ASSERT_TRUE(map.isOk());
  EXPECT_EQ(map->assignedSlots(), 100);
  EXPECT_EQ(map->masterOf(100), nullptr);
  SlotMap before = *map;
  EXPECT_TRUE(map->assign(5, {"127.0.0.1", 7001, ""}));
  EXPECT_FALSE(map->assign(5, {"127.0.0.1", 7001, ""}));  // no change the second time
  EXPECT_EQ(map->masterOf(5)->toString(), "127.0.0.1:7001");
  EXPECT_EQ(map->masterOf(6)->toString(), "127.0.0.1:7000");
  EXPECT_FALSE(map->sameAs(before));
  EXPECT_TRUE(before.sameAs(before));
}

TEST(SlotMapTest, RejectsMalformedReplies) {
  config::RedisNodeAddress asked{"127.0.0.1", 7000, ""};
  auto e =
      SlotMap::fromClusterSlots(error("ERR This instance has cluster support disabled"), asked);
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("cluster support disabled"), std::string::npos);
  EXPECT_FALSE(SlotMap::fromClusterSlots(array({range(5, 4, "h", 1)}), asked).isOk());
  EXPECT_FALSE(SlotMap::fromClusterSlots(array({range(0, 16384, "h", 1)}), asked).isOk());
  EXPECT_FALSE(SlotMap::fromClusterSlots(array({array({integer(0)})}), asked).isOk());
  EXPECT_FALSE(SlotMap::fromClusterSlots(str("nope"), asked).isOk());
}

}  // namespace
}  // namespace sidelock::backend
