// RedisNode against a real redis-server: handshake (INFO run_id / uptime), plain commands, state
// notifications, restarts, and the ownership rules for requests on shutdown and destruction.
#include "redis/redis_node.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>

#include "integration/redis_test_env.h"
#include "redis/scripts.h"

namespace sidelock::backend {
namespace {

using testing::LoopEnv;
using testing::RedisServer;

RedisNodeOptions options(int port) {
  RedisNodeOptions o;
  o.address = testing::localNode(port);
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 300;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  o.health_interval_ms = 100;
  return o;
}

class RedisNodeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (node_) {
      bool done = false;
      node_->shutdown([&] { done = true; });
      EXPECT_TRUE(env_.runUntil([&] { return done; }));
      node_.reset();
    }
    env_.close();
  }

  RedisNode& make(RedisNodeOptions o) {
    node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), std::move(o),
                                        &env_.metrics().node(redis_.address()));
    return *node_;
  }

  StatusOr<RedisValue> run(std::vector<std::string> argv, int64_t timeout_ms = 0) {
    std::optional<StatusOr<RedisValue>> r;
    node_->command(std::move(argv), timeout_ms, [&](StatusOr<RedisValue> v) { r.emplace(v); });
    EXPECT_FALSE(r.has_value()) << "callback ran inside the call";
    if (!env_.runUntil([&] { return r.has_value(); })) return internalError("test: no callback");
    return std::move(*r);
  }

  RedisServer redis_;
  LoopEnv env_;
  std::unique_ptr<RedisNode> node_;
};

TEST_F(RedisNodeTest, ConnectsReadsServerInfoAndRunsCommands) {
  RedisNode& n = make(options(redis_.port()));
  std::vector<bool> transitions;
  n.setStateListener([&](bool up) { transitions.push_back(up); });
  EXPECT_FALSE(n.up());
  EXPECT_FALSE(n.downReason().empty());
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
  EXPECT_TRUE(n.downReason().empty());
  EXPECT_EQ(n.address(), redis_.address());
  EXPECT_EQ(n.serverInfo().run_id.size(), 40u) << n.serverInfo().run_id;
  EXPECT_GE(n.serverInfo().uptime_ms, 0);
  EXPECT_GT(n.serverInfo().learned_at_ms, 0);

  auto set = run({"SET", "plain", std::string("a\0b", 3)});
  ASSERT_TRUE(set.isOk());
  EXPECT_EQ(set->type, RedisValue::Type::kStatus);
  auto get = run({"GET", "plain"});
  ASSERT_TRUE(get.isOk());
  EXPECT_EQ(get->str, std::string("a\0b", 3)) << "binary-safe arguments";
  auto err = run({"INCR", "plain"});
  ASSERT_TRUE(err.isOk()) << "an error reply is a value";
  EXPECT_TRUE(err->isError());
  auto arr = run({"MGET", "plain", "missing"});
  ASSERT_TRUE(arr.isOk());
  ASSERT_EQ(arr->elements.size(), 2u);
  EXPECT_EQ(arr->elements[1].type, RedisValue::Type::kNil);

  ASSERT_TRUE(env_.runUntil([&] { return !transitions.empty(); }));
  EXPECT_EQ(transitions, std::vector<bool>{true});
  EXPECT_EQ(env_.metrics().node(redis_.address()).up->Value(), 1.0);
}

TEST_F(RedisNodeTest, RestartIsSeenAsNewRunIdAndCounted) {
  RedisNode& n = make(options(redis_.port()));
  std::vector<bool> transitions;
  n.setStateListener([&](bool up) { transitions.push_back(up); });
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  const std::string first = n.serverInfo().run_id;

  redis_.restart();
  ASSERT_TRUE(env_.runUntil([&] { return transitions.size() >= 3; }, 5000)) << n.downReason();
  EXPECT_EQ(transitions, (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(n.up());
  EXPECT_NE(n.serverInfo().run_id, first);
  EXPECT_LT(n.serverInfo().uptime_ms, 60'000);
  EXPECT_GE(env_.metrics().node(redis_.address()).reconnects->Value(), 1.0);
  auto pong = run({"PING"});
  ASSERT_TRUE(pong.isOk());
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(RedisNodeTest, ScriptsRunByShaAndReloadAfterFlush) {
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  // SCRIPT LOAD ran in the handshake: the acquire script is cached on the server.
  ASSERT_EQ(redis_.cli({"SCRIPT", "FLUSH"}), "OK");
  std::optional<StatusOr<RedisValue>> r;
  n.runScript(ScriptId::kAcquire, {lockKey("t:", "a"), tokenKey("t:", "a")}, {"o", "1000", "61000"},
              0, NodeOp::kAcquire, [&](StatusOr<RedisValue> v) { r.emplace(v); });
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }));
  auto decoded = decodeAcquire(*r, n.address());
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  EXPECT_TRUE(decoded->granted);
  EXPECT_GT(decoded->token, 0u);
  EXPECT_EQ(env_.metrics().node(redis_.address()).noscript_reloads->Value(), 1.0);
}

TEST_F(RedisNodeTest, IdlePingDetectsPausedServer) {
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  redis_.pause();
  // No command is sent: the health PING (every 100 ms, 300 ms deadline) must notice.
  ASSERT_TRUE(env_.runUntil([&] { return !n.up(); }, 3000));
  EXPECT_NE(n.downReason().find("PING"), std::string::npos) << n.downReason();
  redis_.resume();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }, 5000)) << n.downReason();
}

TEST_F(RedisNodeTest, DestroyWithPendingRequestsDropsThem) {
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  redis_.pause();
  bool called = false;
  n.command({"PING"}, 5000, [&](StatusOr<RedisValue>) { called = true; });
  env_.runFor(10);
  EXPECT_EQ(n.pendingRequests(), 1u);
  node_.reset();  // without shutdown: the request is orphaned, its callback skipped
  env_.runFor(20);
  EXPECT_FALSE(called);
  redis_.resume();
}

// libuv runs timers before it polls for I/O. After a loop stall (here: the test thread simply not
// running the loop) a request's deadline fires while its reply already waits in the socket; the
// node must let the poll phase read it instead of timing out a healthy link.
TEST_F(RedisNodeTest, DeadlineDuringLoopStallReadsTheWaitingReply) {
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  redis_.pause();
  std::optional<StatusOr<RedisValue>> r;
  n.command({"PING"}, 100, [&](StatusOr<RedisValue> v) { r.emplace(v); });
  env_.runFor(20);  // the command is written; the stopped server cannot answer yet
  ASSERT_FALSE(r.has_value());
  redis_.resume();
  // The loop stalls past the deadline while the server answers into the socket.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }));
  ASSERT_TRUE(r->isOk()) << r->status().toString();
  EXPECT_EQ((*r)->str, "PONG");
  EXPECT_TRUE(n.up()) << n.downReason();
  EXPECT_EQ(env_.metrics().node(redis_.address()).errors_timeout->Value(), 0.0);
}

TEST_F(RedisNodeTest, UnixSocketAddress) {
  const std::string dir = testing::makeTempDir("sidelock-redis-unix");
  RedisServer::Options o;
  o.extra_args = {"--unixsocket", dir + "/redis.sock", "--unixsocketperm", "700"};
  RedisServer unix_redis(o);
  RedisNodeOptions opts = options(0);
  opts.address = config::RedisNodeAddress{};
  opts.address.unix_path = dir + "/redis.sock";
  node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), opts, nullptr);
  node_->start();
  ASSERT_TRUE(env_.runUntil([&] { return node_->up(); })) << node_->downReason();
  EXPECT_EQ(node_->address(), "unix:" + dir + "/redis.sock");
  auto pong = run({"PING"});
  ASSERT_TRUE(pong.isOk());
  EXPECT_EQ(pong->str, "PONG");
  bool done = false;
  node_->shutdown([&] { done = true; });
  ASSERT_TRUE(env_.runUntil([&] { return done; }));
  node_.reset();
  testing::removeTree(dir);
}

}  // namespace
}  // namespace sidelock::backend
