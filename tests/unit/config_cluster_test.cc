// backend.type: cluster in the config: seeds parse, and what Redis Cluster cannot do is refused
// with an error naming the key.
#include <gtest/gtest.h>

#include "config/config.h"

namespace sidelock::config {
namespace {

TEST(ConfigClusterTest, SeedsParse) {
  auto c = loadConfigFromString(
      "backend:\n  type: cluster\n  nodes: [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.type, BackendType::kCluster);
  ASSERT_EQ(c->backend.nodes.size(), 2u);
  EXPECT_EQ(c->backend.nodes[1].toString(), "10.0.0.2:7000");
}

TEST(ConfigClusterTest, OneSeedIsEnough) {
  auto c = loadConfigFromString("backend:\n  type: cluster\n  nodes: [\"127.0.0.1:7000\"]\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.nodes.size(), 1u);
}

TEST(ConfigClusterTest, DatabaseOtherThanZeroIsRefused) {
  auto c =
      loadConfigFromString("backend:\n  type: cluster\n  nodes: [\"127.0.0.1:7000\"]\n  db: 2\n");
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("backend.db"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("cluster"), std::string::npos) << c.status().message();
}

TEST(ConfigClusterTest, UnknownTypeListsCluster) {
  auto c = loadConfigFromString("backend:\n  type: clustr\n");
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("backend.type"), std::string::npos);
  EXPECT_NE(c.status().message().find("cluster"), std::string::npos) << c.status().message();
}

TEST(ConfigClusterTest, DuplicateSeedIsRefused) {
  auto c = loadConfigFromString(
      "backend:\n  type: cluster\n  nodes: [\"127.0.0.1:7000\", \"127.0.0.1:7000\"]\n");
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("backend.nodes[1]"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace sidelock::config
