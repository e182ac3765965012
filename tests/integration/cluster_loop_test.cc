// ClusterBackend and sharded pub/sub in-process, on a real loop against a real three-master
// cluster: the pieces the sidecar tests cannot see (a refused SSUBSCRIBE reported with its
// channel, every call answered exactly once across shutdown, the loop closing cleanly).
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "redis/cluster_backend.h"
#include "redis/scripts.h"
#include "redis_test_env.h"
#include "support/redis_cluster.h"

namespace sidelock::testing {
namespace {

using backend::ClusterBackend;

class ClusterLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<RedisCluster>(3);
    config::BackendConfig c = redisConfig(cluster_->server(0).port());
    c.type = config::BackendType::kCluster;
    c.command_timeout_ms = 2000;
    c.connect_timeout_ms = 2000;
    backend_ =
        std::make_unique<ClusterBackend>(env_.loop(), env_.scheduler(), c, 60'000, env_.metrics());
    backend_->start();
    ASSERT_TRUE(env_.runUntil([&] { return backend_->health().ready; }, 10'000))
        << backend_->health().reason;
  }
  void TearDown() override {
    env_.shutDown(backend_);
    env_.close();
  }

  std::unique_ptr<RedisCluster> cluster_;
  LoopEnv env_;
  std::unique_ptr<ClusterBackend> backend_;
};

TEST_F(ClusterLoopTest, DiscoversEveryMasterFromOneSeed) {
  const auto health = backend_->health();
  ASSERT_EQ(health.nodes.size(), 3u);
  for (const auto& n : health.nodes) EXPECT_TRUE(n.up) << n.address << ": " << n.reason;
  EXPECT_EQ(backend_->slotMap().assignedSlots(), backend::kClusterSlots);
  for (size_t i = 0; i < cluster_->size(); ++i) {
    EXPECT_NE(backend_->node(cluster_->address(i)), nullptr) << cluster_->address(i);
  }
}

TEST_F(ClusterLoopTest, ARefusedShardSubscriptionIsReportedWithItsChannel) {
  // A channel whose slot another master serves: that node answers SSUBSCRIBE with MOVED.
  std::string channel;
  size_t owner = 0;
  for (int i = 0; channel.empty(); ++i) {
    const std::string c = backend::releaseChannel("sidelock:", "n" + std::to_string(i));
    owner = static_cast<size_t>(cluster_->ownerOf(backend::clusterKeySlot(c)));
    if (owner != 0) channel = c;
  }
  backend::RedisNode* wrong = backend_->node(cluster_->address(0));
  ASSERT_NE(wrong, nullptr);
  std::vector<std::pair<std::string, std::string>> refused;
  wrong->setSubscribeErrorListener(
      [&](const std::string& c, const std::string& error) { refused.emplace_back(c, error); });
  wrong->subscribe(channel);
  ASSERT_TRUE(env_.runUntil([&] { return !refused.empty(); }));
  EXPECT_EQ(refused[0].first, channel);
  EXPECT_TRUE(refused[0].second.starts_with("MOVED ")) << refused[0].second;
  EXPECT_NE(refused[0].second.find(cluster_->address(owner)), std::string::npos);
  EXPECT_FALSE(wrong->subscribed(channel));
  // The right master takes it.
  backend::RedisNode* right = backend_->node(cluster_->address(owner));
  ASSERT_NE(right, nullptr);
  right->subscribe(channel);
  EXPECT_TRUE(env_.runUntil([&] { return right->subscribed(channel); }));
  wrong->unsubscribe(channel);
  right->unsubscribe(channel);
}

TEST_F(ClusterLoopTest, WatchedReleasesArriveFromEveryShardAndShutdownAnswersEveryCall) {
  std::vector<std::string> released;
  backend_->setReleaseListener([&](std::string_view name, std::string_view reason) {
    // Grants are announced too (SPUBLISH, like releases): only the releases are counted here.
    if (backend::announcement::freesLock(reason)) released.emplace_back(name);
  });
  std::vector<std::string> names;
  std::set<std::string> homes;
  for (int i = 0; homes.size() < 3 && i < 1000; ++i) {
    const std::string name = "w" + std::to_string(i);
    backend_->watchReleases(name);
    const std::string home = backend_->subscriptionHome(name);
    if (homes.insert(home).second) {
      names.push_back(name);
    } else {
      backend_->unwatchReleases(name);
    }
  }
  ASSERT_EQ(homes.size(), 3u) << "one watched name per master";
  for (const auto& name : names) {
    ASSERT_TRUE(env_.runUntil([&] {
      return backend_->node(backend_->subscriptionHome(name))
          ->subscribed(backend::releaseChannel("sidelock:", name));
    }));
    bool granted = false;
    backend_->run(backend::Operation::acquire(name, "me", 10'000),
                  [&](StatusOr<backend::Outcome> r) {
                    ASSERT_TRUE(r.isOk()) << r.status().toString();
                    granted = r->ok();
                  });
    ASSERT_TRUE(env_.runUntil([&] { return granted; }));
    backend_->run(backend::Operation::release(name, "me"), [](StatusOr<backend::Outcome> r) {
      ASSERT_TRUE(r.isOk()) << r.status().toString();
      EXPECT_EQ(r->code, backend::OutcomeCode::kOk);
    });
  }
  ASSERT_TRUE(env_.runUntil([&] { return released.size() == names.size(); }));
  EXPECT_EQ(std::set<std::string>(released.begin(), released.end()),
            std::set<std::string>(names.begin(), names.end()));
  for (const auto& name : names) backend_->unwatchReleases(name);

  // Calls in flight when shutdown starts are each answered once, as cancelled or with a reply.
  int answered = 0;
  for (int i = 0; i < 30; ++i) {
    backend_->run(backend::Operation::inspect("s" + std::to_string(i)),
                  [&](StatusOr<backend::Outcome>) { ++answered; });
  }
  bool done = false;
  backend_->shutdown([&] { done = true; });
  ASSERT_TRUE(env_.runUntil([&] { return done; }));
  EXPECT_EQ(answered, 30);
  bool after = false;
  backend_->run(backend::Operation::acquire("late", "me", 1000), [&](StatusOr<backend::Outcome> r) {
    EXPECT_FALSE(r.isOk());
    after = true;
  });
  EXPECT_TRUE(env_.runUntil([&] { return after; }));
  backend_.reset();
}

}  // namespace
}  // namespace sidelock::testing
