// RedisNode against a real redis-server: handshake (INFO run_id / uptime), plain commands, state
// notifications, restarts, and the ownership rules for requests on shutdown and destruction.
#include "redis/redis_node.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <set>
#include <thread>

#include "integration/redis_test_env.h"
#include "redis/scripts.h"
#include "redis/transport.h"

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
  o.scripts = sidelockScripts();
  return o;
}

class RedisNodeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    env_.shutDown(node_);
    env_.close();
  }

  RedisNode& make(RedisNodeOptions o) {
    node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), std::move(o),
                                        &env_.metrics().node(redis_.address()));
    return *node_;
  }

  StatusOr<RedisValue> run(std::vector<std::string> argv, int64_t timeout_ms = 0) {
    std::optional<StatusOr<RedisValue>> r;
    const std::vector<std::string_view> args(argv.begin(), argv.end());
    node_->commandArgv(args, timeout_ms, [&](StatusOr<RedisValue> v) { r.emplace(v); });
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
  // The keys and arguments the sidecar sends (scriptCallFor), not a hand-made subset.
  auto call = scriptCallFor(Operation::acquire("a", "o", 1000), ScriptContext{"t:", "61000", false});
  ASSERT_TRUE(call.isOk()) << call.status().toString();
  const ScriptCall::Views v = call->views();
  n.runScriptArgs(static_cast<size_t>(ScriptId::kAcquire), v.keyArgs(), v.argArgs(), 0,
                  NodeOp::kAcquire, [&](StatusOr<RedisValue> reply) { r.emplace(reply); });
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }));
  auto decoded = decodeOutcome(*r, ScriptId::kAcquire, n.address());
  ASSERT_TRUE(decoded.isOk()) << decoded.status().toString();
  EXPECT_TRUE(decoded->ok());
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

// A request's own budget only answers its caller: a Redis stall longer than a call's budget (a
// fork, an fsync) but shorter than command_timeout_ms must not tear the link down, and the late
// reply is discarded when it comes.
TEST_F(RedisNodeTest, RequestBudgetEndsButTheLinkSurvivesAStall) {
  RedisNodeOptions o = options(redis_.port());
  o.command_timeout_ms = 2000;
  o.health_interval_ms = 5000;
  RedisNode& n = make(o);
  std::vector<bool> transitions;
  n.setStateListener([&](bool up) { transitions.push_back(up); });
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  ASSERT_TRUE(run({"SET", "budget", "before"}).isOk());

  redis_.pause();
  std::optional<StatusOr<RedisValue>> r;
  n.command({"GET", "budget"}, 50, [&](StatusOr<RedisValue> v) { r.emplace(v); });
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }, 1000));
  ASSERT_FALSE(r->isOk());
  EXPECT_EQ(r->status().code(), StatusCode::kDeadlineExceeded) << r->status().toString();
  EXPECT_NE(r->status().message().find("timed out after 50 ms"), std::string::npos)
      << r->status().toString();
  env_.runFor(100);  // the stall outlasts the budget
  EXPECT_TRUE(n.up()) << n.downReason();
  EXPECT_EQ(n.pendingRequests(), 1u) << "the slot waits for the late reply";
  redis_.resume();

  // The late reply is dropped; the next request gets its own answer, not the old one.
  auto after = run({"SET", "budget", "after"});
  ASSERT_TRUE(after.isOk()) << after.status().toString();
  EXPECT_EQ(after->str, "OK");
  auto get = run({"GET", "budget"});
  ASSERT_TRUE(get.isOk());
  EXPECT_EQ(get->str, "after");
  EXPECT_EQ(n.pendingRequests(), 0u);
  EXPECT_EQ(transitions, std::vector<bool>{true}) << "never went down";
  auto& m = env_.metrics().node(redis_.address());
  EXPECT_EQ(m.reconnects->Value(), 0.0);
  EXPECT_EQ(m.errors_timeout->Value(), 1.0);
}

// The link itself is declared dead only when the oldest request waited command_timeout_ms with
// nothing read: then every pending caller hears it and the node reconnects.
TEST_F(RedisNodeTest, SilentLinkIsTornDownAfterCommandTimeout) {
  RedisNodeOptions o = options(redis_.port());
  o.health_interval_ms = 5000;  // no PING: the user's request is what finds the silence
  RedisNode& n = make(o);
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  redis_.pause();
  // The oldest request (an acquire script) goes unanswered; the PING behind it fails with the
  // link too, and each caller's error names its own request, then why the link went down.
  std::optional<StatusOr<RedisValue>> acquired;
  auto call =
      scriptCallFor(Operation::acquire("a", "o", 1000), ScriptContext{"t:", "61000", false});
  ASSERT_TRUE(call.isOk()) << call.status().toString();
  const ScriptCall::Views args = call->views();
  n.runScriptArgs(static_cast<size_t>(ScriptId::kAcquire), args.keyArgs(), args.argArgs(), 10'000,
                  NodeOp::kAcquire, [&](StatusOr<RedisValue> reply) { acquired.emplace(reply); });
  std::optional<StatusOr<RedisValue>> r;
  n.command({"PING"}, 10'000, [&](StatusOr<RedisValue> v) { r.emplace(v); });
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value() && acquired.has_value(); }, 3000));
  ASSERT_FALSE(r->isOk());
  EXPECT_EQ(r->status().code(), StatusCode::kUnavailable) << r->status().toString();
  const std::string& ping_error = r->status().message();
  EXPECT_EQ(ping_error.find(": command not answered, the link went down: the oldest request "
                            "(acquire) got no reply for 300 ms"),
            redis_.address().size() + std::string("redis ").size())
      << ping_error;
  ASSERT_FALSE(acquired->isOk());
  EXPECT_NE(acquired->status().message().find(": acquire not answered"), std::string::npos)
      << acquired->status().toString();
  EXPECT_FALSE(n.up());
  EXPECT_NE(n.downReason().find("no reply for 300 ms"), std::string::npos) << n.downReason();
  redis_.resume();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }, 5000)) << n.downReason();
  EXPECT_GE(env_.metrics().node(redis_.address()).reconnects->Value(), 1.0);
}

// The same when the oldest request is the node's own health PING: a caller's request queued
// behind it is told that its own request went unanswered, then why (it used to read "PING timed
// out", as if the caller had sent a PING).
TEST_F(RedisNodeTest, ARequestBehindATimedOutPingNamesItself) {
  RedisNodeOptions o = options(redis_.port());
  o.health_interval_ms = 20;
  RedisNode& n = make(o);
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  redis_.pause();
  ASSERT_TRUE(env_.runUntil([&] { return n.pendingRequests() > 0; }, 2000)) << "no health PING";
  std::optional<StatusOr<RedisValue>> r;
  n.command({"GET", "k"}, 10'000, [&](StatusOr<RedisValue> v) { r.emplace(v); });
  ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }, 3000));
  redis_.resume();
  ASSERT_FALSE(r->isOk());
  EXPECT_EQ(r->status().code(), StatusCode::kUnavailable) << r->status().toString();
  EXPECT_NE(r->status().message().find(": command not answered, the link went down: PING timed "
                                       "out after 300 ms"),
            std::string::npos)
      << r->status().toString();
}

// Many callers in one loop turn: their commands share the write buffer and the replies come back
// to each caller in order.
TEST_F(RedisNodeTest, PipelinedCommandsAnswerTheirOwnCallers) {
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  constexpr int kCount = 5000;
  std::vector<int64_t> got(kCount, -1);
  int answered = 0;
  for (int i = 0; i < kCount; ++i) {
    n.command({"INCR", "pipelined"}, 0, [&, i](StatusOr<RedisValue> v) {
      ++answered;
      if (v.isOk()) got[static_cast<size_t>(i)] = v->integer;
    });
  }
  EXPECT_EQ(n.pendingRequests(), static_cast<size_t>(kCount));
  ASSERT_TRUE(env_.runUntil([&] { return answered == kCount; }, 10'000));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], i + 1) << "caller " << i;
}

// Commands queued in one loop turn leave every RedisConnectionOptions::flush_every_commands (8),
// not only when the turn ends: Redis has run the first eight before the loop turns again.
TEST_F(RedisNodeTest, CommandsOfOneTurnGoOutEveryEight) {
  RedisNodeOptions o = options(redis_.port());
  o.command_timeout_ms = 30'000;  // the test holds the loop while it looks: no liveness verdict
  o.health_interval_ms = 30'000;
  RedisNode& n = make(std::move(o));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  int answered = 0;
  auto queue = [&](int count) {
    for (int i = 0; i < count; ++i) {
      n.command({"INCR", "early"}, 0, [&](StatusOr<RedisValue> v) { answered += v.isOk(); });
    }
  };
  queue(11);  // the first 8 are written at once, the other 3 at the end of the turn
  // The loop does not run meanwhile: only the early write can have reached Redis.
  std::string seen;
  for (int tries = 0; tries < 100 && seen != "8"; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = redis_.cli({"GET", "early"});  // cli() drops the trailing newline
  }
  EXPECT_EQ(seen, "8");
  ASSERT_TRUE(env_.runUntil([&] { return answered == 11; }));
  EXPECT_EQ(redis_.cli({"GET", "early"}), "11");
}

// hiredis 0.14 resolved names synchronously on the loop thread; ours go to libuv's thread pool.
// "localhost" may resolve to ::1 first while redis-server listens on 127.0.0.1 only: every
// address is tried.
TEST_F(RedisNodeTest, HostNameIsResolved) {
  RedisNodeOptions o = options(redis_.port());
  o.address.host = "localhost";
  node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), o, nullptr);
  node_->start();
  ASSERT_TRUE(env_.runUntil([&] { return node_->up(); })) << node_->downReason();
  EXPECT_EQ(node_->address(), "localhost:" + std::to_string(redis_.port()));
  auto pong = run({"PING"});
  ASSERT_TRUE(pong.isOk());
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(RedisNodeTest, UnknownHostNameKeepsTheNodeDownWithTheReason) {
  RedisNodeOptions o = options(redis_.port());
  o.address.host = "no-such-host.invalid";
  node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), o, nullptr);
  node_->start();
  ASSERT_TRUE(
      env_.runUntil([&] { return node_->downReason().find("resolve") != std::string::npos; }, 5000))
      << node_->downReason();
  EXPECT_FALSE(node_->up());
}

// Sentinel and Cluster move a node at run time: the node drops its link and reconnects to the
// new address, with the new server's identity.
TEST_F(RedisNodeTest, SetAddressMovesToAnotherServer) {
  RedisServer other;
  RedisNode& n = make(options(redis_.port()));
  n.start();
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); }));
  const std::string first_run_id = n.serverInfo().run_id;
  n.setAddress(testing::localNode(other.port()));
  EXPECT_EQ(n.address(), other.address());
  ASSERT_TRUE(env_.runUntil([&] { return n.up() && n.serverInfo().run_id != first_run_id; }))
      << n.downReason();
  ASSERT_TRUE(run({"SET", "moved", "yes"}).isOk());
  EXPECT_EQ(other.cli({"GET", "moved"}), "yes");
  EXPECT_EQ(redis_.cli({"EXISTS", "moved"}), "0");
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

// A transport whose link broke (its error not reported yet: that comes on a later turn) says it
// took nothing, so the connection does not fail those requests as "may have run" (an unanswered
// acquire's give-back, a caller told its acquire may have been granted).
TEST(SocketTransportTest, AWriteToABrokenLinkSaysItTookNothing) {
  LoopEnv env;
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  struct Events : RedisTransport::Handler {
    bool connected = false;
    std::string error;
    void onTransportConnected() override { connected = true; }
    void onTransportData(const char*, size_t) override {}
    void onTransportError(std::string reason) override { error = std::move(reason); }
  } events;
  auto transport = makeSocketTransport(env.loop(), env.scheduler());
  std::string bytes = "PING\r\n";
  EXPECT_FALSE(transport->write(bytes)) << "not connected yet";
  EXPECT_TRUE(bytes.empty());
  transport->connect(testing::localNode(ntohs(addr.sin_port)), &events);
  ASSERT_TRUE(env.runUntil([&] { return events.connected; }));
  const int peer = accept(listener, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  bytes = "PING\r\n";
  EXPECT_TRUE(transport->write(bytes)) << "a live link takes the bytes";
  char got[16];
  EXPECT_EQ(read(peer, got, sizeof got), 6);

  // The peer resets the link; the loop has not run since, so nobody has been told.
  const linger reset{1, 0};
  ASSERT_EQ(setsockopt(peer, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
  close(peer);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bytes = "PING\r\n";
  EXPECT_FALSE(transport->write(bytes)) << "written into a reset link";
  bytes = "PING\r\n";
  EXPECT_FALSE(transport->write(bytes)) << "failed, not reported yet";
  EXPECT_TRUE(events.error.empty()) << "reported only on a later turn: " << events.error;
  ASSERT_TRUE(env.runUntil([&] { return !events.error.empty(); }));
  transport->close();
  transport.reset();
  close(listener);
  env.close();
}

// The fixtures' own promises, which every test that starts two listeners leans on: a port is
// handed out once per process (a sidecar's listen.tcp and listen.admin were once given the same
// one and its config was refused), and from below the ephemeral range that outgoing
// connections' local ports come from.
TEST(TestFixtures, PickFreePortNeverHandsOutTheSamePortTwice) {
  const int ephemeral_low = testing::ephemeralPortLow();
  std::set<int> seen;
  for (int i = 0; i < 2000; ++i) {
    const int port = testing::pickFreePort();
    if (ephemeral_low > 12000) {  // else the picker falls back to bind(0)
      EXPECT_GE(port, 10000);
      EXPECT_LT(port, ephemeral_low);
    }
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
  }
  for (int i = 0; i < 50; ++i) {
    const int port = testing::pickFreeClusterPort();
    EXPECT_TRUE(seen.insert(port).second) << "cluster port " << port << " handed out twice";
    EXPECT_TRUE(seen.insert(port + 10000).second) << "bus port " << port + 10000 << " again";
  }
}

// A killed server's port stays bound (not listening) until it restarts: refused to clients as a
// dead server's, and never taken by another process's pick, so the restart gets it back.
TEST(TestFixtures, AKilledServersPortIsHeldUntilItRestarts) {
  testing::RedisServer server;
  const int port = server.port();
  server.kill();
  auto bind_or_connect = [port](bool connect_instead) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const auto* a = reinterpret_cast<const sockaddr*>(&addr);
    const int rc = connect_instead ? connect(fd, a, sizeof addr) : bind(fd, a, sizeof addr);
    close(fd);
    return rc == 0;
  };
  EXPECT_FALSE(bind_or_connect(false)) << "another process could take port " << port;
  EXPECT_FALSE(bind_or_connect(true)) << "a dead server's port accepted a connection";
  server.restart();
  EXPECT_EQ(server.cli({"PING"}), "PONG");
  EXPECT_EQ(server.port(), port);
}

}  // namespace
}  // namespace sidelock::backend
