// A real libuv loop for the redis tests: UvScheduler, Metrics, helpers to run the loop until a
// condition holds (with a deadline so no test can hang), and a teardown that checks the loop
// closes cleanly (src/README.md, rule 9).
#pragma once

#include <gtest/gtest.h>
#include <uv.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "config/config.h"
#include "event/uv_handle.h"
#include "event/uv_scheduler.h"
#include "metrics/metrics.h"
#include "support/redis_server.h"

namespace sidelock::testing {

class LoopEnv {
 public:
  LoopEnv() {
    uv_loop_init(&loop_);
    scheduler_ = std::make_unique<event::UvScheduler>(&loop_);
    // A ticking timer so that uv_run(UV_RUN_ONCE) always returns to re-check the condition.
    uv_timer_t* t = tick_.allocate(nullptr);
    uv_timer_init(&loop_, t);
    uv_timer_start(
        t, [](uv_timer_t*) {}, 2, 2);
  }
  ~LoopEnv() {
    if (!closed_) close();
  }

  uv_loop_t* loop() { return &loop_; }
  event::UvScheduler& scheduler() { return *scheduler_; }
  metrics::Metrics& metrics() { return metrics_; }

  /// Runs the loop until `pred` holds; false if it did not within `timeout_ms`.
  bool runUntil(const std::function<bool()>& pred, int64_t timeout_ms = 5000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      uv_run(&loop_, UV_RUN_ONCE);
    }
    return true;
  }
  void runFor(int64_t ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    runUntil([&] { return std::chrono::steady_clock::now() >= until; }, ms + 1000);
  }

  /// Shuts `object` down (a backend, a node: anything with shutdown(done)), runs the loop until
  /// it says done, and destroys it. Nothing to do for a null pointer.
  template <typename T>
  void shutDown(std::unique_ptr<T>& object) {
    if (object == nullptr) return;
    bool done = false;
    object->shutdown([&] { done = true; });
    EXPECT_TRUE(runUntil([&] { return done; })) << "shutdown did not finish";
    object.reset();
  }

  /// Closes our handles, drains the loop (bounded) and checks uv_loop_close() == 0.
  void close() {
    closed_ = true;
    tick_.close();
    scheduler_->close();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (uv_loop_alive(&loop_) != 0 && std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop_, UV_RUN_NOWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(uv_loop_close(&loop_), 0) << "a uv handle was left open";
  }

 private:
  uv_loop_t loop_{};
  std::unique_ptr<event::UvScheduler> scheduler_;
  metrics::Metrics metrics_;
  event::UvHandle<uv_timer_t> tick_;
  bool closed_ = false;
};

inline config::RedisNodeAddress localNode(int port) {
  config::RedisNodeAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  return a;
}

/// A backend config for one local redis with test-friendly timeouts.
inline config::BackendConfig redisConfig(int port) {
  config::BackendConfig c;
  c.type = config::BackendType::kRedis;
  c.nodes = {localNode(port)};
  c.key_prefix = "sidelock:";
  c.connect_timeout_ms = 300;
  c.command_timeout_ms = 300;
  c.reconnect_min_ms = 20;
  c.reconnect_max_ms = 200;
  c.health_interval_ms = 200;
  return c;
}

}  // namespace sidelock::testing
