// Fixture for the Redlock integration tests: five real redis-server processes, a real uv loop
// (LoopEnv from redis_test_env.h, whose runUntil has a deadline so nothing can hang), backends
// created on demand, synchronous wrappers that run the loop until a callback came, and a teardown
// that shuts every backend down and checks the loop closes cleanly.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "event/scheduler.h"
#include "integration/redis_test_env.h"
#include "redis/redlock_backend.h"
#include "redis/scripts.h"
#include "support/redis_server.h"

namespace sidelock::testing {

class RedlockTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 5;
  static constexpr int64_t kNodeTimeoutMs = 200;
  static constexpr int64_t kSettleMs = 20;

  void SetUp() override {
    for (int i = 0; i < kNodes; ++i) servers_.push_back(std::make_unique<RedisServer>());
  }

  void TearDown() override {
    for (auto& s : servers_) {
      if (s->running()) s->resume();
    }
    for (auto& b : backends_) {
      bool done = false;
      b->shutdown([&done] { done = true; });
      EXPECT_TRUE(env_.runUntil([&] { return done; }, 5000)) << "shutdown never finished";
    }
    backends_.clear();
    env_.close();
    servers_.clear();
  }

  config::BackendConfig redlockConfig(bool delayed_restart = false) {
    // One redis's test-friendly timeouts, for every node.
    config::BackendConfig c = redisConfig(servers_.front()->port());
    c.type = config::BackendType::kRedlock;
    c.nodes.clear();
    for (auto& s : servers_) c.nodes.push_back(localNode(s->port()));
    c.health_interval_ms = 100;
    c.redlock.node_timeout_ms = kNodeTimeoutMs;
    c.redlock.drift_factor = 0.01;
    c.redlock.delayed_restart = delayed_restart;
    return c;
  }

  /// A started backend (not yet necessarily ready).
  backend::RedlockBackend& makeBackend(config::BackendConfig c, int64_t max_ttl_ms = 600'000) {
    backends_.push_back(std::make_unique<backend::RedlockBackend>(env_.loop(), env_.scheduler(), c,
                                                                  max_ttl_ms, env_.metrics()));
    backends_.back()->start();
    return *backends_.back();
  }

  backend::RedlockBackend& makeReadyBackend(bool delayed_restart = false,
                                            int64_t max_ttl_ms = 600'000) {
    auto& b = makeBackend(redlockConfig(delayed_restart), max_ttl_ms);
    EXPECT_TRUE(waitAllVoting(b, max_ttl_ms + 5000)) << b.health().reason;
    return b;
  }

  /// A ready backend whose votes may wait seconds for paused nodes (node budget 5 s, the link
  /// not declared down meanwhile) and whose validity is about half the TTL (drift_factor 0.5):
  /// pausing nodes past it makes a vote won with no validity left.
  backend::RedlockBackend& makeSlowVoteBackend() {
    auto c = redlockConfig();
    c.redlock.node_timeout_ms = 5'000;
    c.redlock.drift_factor = 0.5;
    c.command_timeout_ms = 5'000;  // idle PINGs must not declare the paused nodes down
    c.health_interval_ms = 5'000;
    auto& b = makeBackend(c);
    EXPECT_TRUE(waitAllVoting(b)) << b.health().reason;
    return b;
  }
  /// Pauses nodes [0, count) now and resumes them `after_ms` later, on the loop (`resume`).
  void pauseFirstNodesFor(int count, int64_t after_ms, event::ScopedTimer& resume) {
    for (int i = 0; i < count; ++i) servers_[i]->pause();
    resume.start(env_.scheduler(), after_ms, [this, count] {
      for (int i = 0; i < count; ++i) servers_[i]->resume();
    });
  }

  bool waitAllVoting(backend::RedlockBackend& b, int64_t timeout_ms = 5000) {
    return env_.runUntil(
        [&] {
          for (size_t i = 0; i < b.nodeCount(); ++i) {
            if (!b.nodeVoting(i)) return false;
          }
          return true;
        },
        timeout_ms);
  }

  /// Kills nodes [from, to), waits until `b` saw them down, restarts them (no persistence:
  /// they come back empty) and waits until `b` saw them up again.
  void restartEmpty(backend::RedlockBackend& b, int from, int to) {
    for (int i = from; i < to; ++i) servers_[i]->kill();
    ASSERT_TRUE(env_.runUntil([&] {
      for (int i = from; i < to; ++i) {
        if (b.health().nodes[i].up) return false;
      }
      return true;
    }));
    for (int i = from; i < to; ++i) servers_[i]->restart();
    ASSERT_TRUE(env_.runUntil([&] {
      for (int i = from; i < to; ++i) {
        if (!b.health().nodes[i].up) return false;
      }
      return true;
    }));
  }

  template <typename T, typename Start>
  StatusOr<T> await(Start start, int64_t timeout_ms = 5000) {
    std::optional<StatusOr<T>> result;
    start([&result](StatusOr<T> r) { result.emplace(std::move(r)); });
    if (!env_.runUntil([&] { return result.has_value(); }, timeout_ms)) {
      ADD_FAILURE() << "no callback within " << timeout_ms << " ms";
      return internalError("timed out in test");
    }
    // Let the rest of the operation (slower nodes' replies, fire-and-forget token sync) finish
    // before the test blocks the loop with redis-cli: a loop stalled past the node timeout would
    // turn replies already waiting in the socket into timeouts.
    env_.runFor(kSettleMs);
    return std::move(*result);
  }

  StatusOr<backend::Outcome> run(backend::Backend& b, const backend::Operation& op) {
    return await<backend::Outcome>([&](backend::OutcomeCallback cb) { b.run(op, std::move(cb)); });
  }
  StatusOr<backend::Outcome> acquire(backend::Backend& b, const std::string& name,
                                     const std::string& owner, int64_t ttl_ms) {
    return run(b, backend::Operation::acquire(name, owner, ttl_ms));
  }
  /// Just the code: what release tests compare.
  StatusOr<backend::OutcomeCode> release(backend::Backend& b, const std::string& name,
                                         const std::string& owner) {
    StatusOr<backend::Outcome> r = run(b, backend::Operation::release(name, owner));
    if (!r.isOk()) return r.status();
    return r->code;
  }
  StatusOr<backend::Outcome> extend(backend::Backend& b, const std::string& name,
                                    const std::string& owner, int64_t ttl_ms) {
    return run(b, backend::Operation::extend(name, owner, ttl_ms));
  }
  StatusOr<backend::Outcome> inspect(backend::Backend& b, const std::string& name) {
    return run(b, backend::Operation::inspect(name));
  }

  /// Counter value `n` above every node's clock for the test's duration (an hour ahead). Counters
  /// follow Redis's clock by the second (src/redis/lua/lib/next_token.lua): a test that sets
  /// diverged counters by hand adds its small numbers to this, or the first grant raises them.
  uint64_t aboveClock(uint64_t n) {
    if (clock_base_ == 0) {
      clock_base_ = (std::stoull(servers_[0]->cli({"TIME"})) + 3600) * 1'000'000;
    }
    return clock_base_ + n;
  }
  std::string aboveClockText(uint64_t n) { return std::to_string(aboveClock(n)); }

  static std::string key(const std::string& name) { return backend::lockKey("sidelock:", name); }
  static std::string counterKey(const std::string& name) {
    return backend::tokenKey("sidelock:", name);
  }

  /// Value of the lock key on node i ("" when missing or the node is down).
  std::string valueOn(int i, const std::string& name) {
    return servers_[i]->running() ? servers_[i]->cli({"GET", key(name)}) : "";
  }
  /// Number of live nodes whose lock key holds `owner`.
  int nodesHolding(const std::string& name, const std::string& owner) {
    int n = 0;
    for (int i = 0; i < kNodes; ++i) n += valueOn(i, name) == owner ? 1 : 0;
    return n;
  }
  /// Number of live nodes that have the lock key at all.
  int nodesWithKey(const std::string& name) {
    int n = 0;
    for (int i = 0; i < kNodes; ++i) {
      if (servers_[i]->running() && servers_[i]->cli({"EXISTS", key(name)}) == "1") ++n;
    }
    return n;
  }

  static int64_t msSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t)
        .count();
  }

  LoopEnv env_;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::unique_ptr<backend::RedlockBackend>> backends_;
  uint64_t clock_base_ = 0;  // aboveClock()
};

}  // namespace sidelock::testing
