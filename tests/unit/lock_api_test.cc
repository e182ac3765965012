// LockApi, the v1 routes' JSON layer, over a real LockService on a FakeScheduler + MemoryBackend
// (pure, deterministic): what the routes do with the service's answers and the client's
// connection. Its HTTP behaviour against the real binary is in tests/integration/api_test.cc.
#include "api/lock_api.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/memory_backend.h"
#include "event/fake_scheduler.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {
namespace {

/// Mirrors HttpServer's Exchange: once the client is gone, clientConnected() is false at once
/// and the client-gone callback is posted to a later turn (never run inside the noticing call).
class FakeResponder final : public http::Responder {
 public:
  explicit FakeResponder(event::FakeScheduler& sched) : sched_(sched) {}
  void send(int status, std::string_view, std::string body,
            std::vector<std::pair<std::string, std::string>>) override {
    if (done_) return;
    done_ = true;
    gone_cb_ = nullptr;
    statuses.push_back(status);
    bodies.push_back(std::move(body));
  }
  void startStream(int status, std::string_view) override { statuses.push_back(status); }
  bool writeChunk(std::string_view data) override {
    bodies.emplace_back(data);
    return !gone_;
  }
  void endStream() override {
    done_ = true;
    gone_cb_ = nullptr;
  }
  bool clientConnected() const override { return !gone_; }
  void onClientGone(std::function<void()> cb) override {
    if (!done_ && !gone_) gone_cb_ = std::move(cb);
  }
  void disconnect() {
    gone_ = true;
    if (gone_cb_) sched_.post(std::exchange(gone_cb_, nullptr));
  }
  std::vector<int> statuses;
  std::vector<std::string> bodies;

 private:
  event::FakeScheduler& sched_;
  bool done_ = false;
  bool gone_ = false;
  std::function<void()> gone_cb_;
};

class LockApiTest : public ::testing::Test {
 protected:
  LockApiTest() {
    cfg.retry_min_ms = 2;
    cfg.retry_max_ms = 500;
    svc = std::make_unique<lock::LockService>(cfg, backend, sched, metrics);
  }

  lock::LockState inspect(std::string_view name) {
    std::optional<StatusOr<lock::LockState>> r;
    svc->inspect(lock::LockId{lock::LockKind::kMutex, std::string(name)},
                 [&](StatusOr<lock::LockState> v) { r.emplace(std::move(v)); });
    sched.runReady();
    EXPECT_TRUE(r && r->isOk());
    return r->value();
  }
  /// Advances in small steps so timers interleave the way they would on a real loop.
  void advance(int64_t ms) {
    for (int64_t t = 0; t < ms; ++t) sched.advanceMs(1);
  }
  /// A POST to a /{name} route with `body`.
  static http::Request post(const std::string& name, std::string body) {
    http::Request req;
    req.method = "POST";
    req.params = {{"name", name}};
    req.body = std::move(body);
    return req;
  }
  double held() { return metrics.held_locks.Value(); }
  double waiters() { return metrics.waiters.Value(); }

  config::LocksConfig cfg;
  event::FakeScheduler sched;
  backend::MemoryBackend backend{sched};
  metrics::Metrics metrics;
  std::unique_ptr<lock::LockService> svc;
};

TEST_F(LockApiTest, AGrantThatReachesAClientThatLeftIsReleased) {
  LockApi lock_api(cfg, *svc, metrics, sched);
  http::Handler acquire;
  for (auto& r : lock_api.routes()) {
    if (r.pattern == "/v1/locks/{name}/acquire") acquire = r.handler;
  }
  ASSERT_TRUE(acquire);
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"plain", R"({"ttl_ms":60000,"wait_ms":5000})"},
      {"renewed", R"({"ttl_ms":60000,"wait_ms":5000,"auto_renew":true})"},
      {"stream", R"({"ttl_ms":60000,"wait_ms":5000,"hold":"stream"})"}};
  for (const auto& [name, body] : bodies) {
    SCOPED_TRACE(name);
    http::Request req = post(name, body);
    auto res = std::make_shared<FakeResponder>(sched);
    acquire(req, res);  // the lock is free: the attempt is in flight
    // The client leaves; the backend's grant is processed before the client-gone callback
    // (on the real loop: the Redis reply and the EOF read in the same poll phase).
    res->disconnect();
    advance(10);
    EXPECT_FALSE(inspect(name).held) << "a grant nobody can learn about must not linger";
  }
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(waiters(), 0);
}

// "holder": a public label, 1..256 printable ASCII, the sidecar's identity by default; a bad
// one is refused (400 naming the field) and changes nothing; inspect and a 409 name it.
TEST_F(LockApiTest, TheHolderIsValidatedDefaultsToTheIdentityAndIsShown) {
  LockApi lock_api(cfg, *svc, metrics, sched);
  lock_api.setIdentity("pod-a");
  http::Handler acquire;
  http::Handler get;
  for (auto& r : lock_api.routes()) {
    if (r.pattern == "/v1/locks/{name}/acquire") acquire = r.handler;
    if (r.pattern == "/v1/locks/{name}" && r.method == "GET") get = r.handler;
  }
  ASSERT_TRUE(acquire && get);
  auto call = [&](const http::Handler& h, http::Request req) {
    auto res = std::make_shared<FakeResponder>(sched);
    h(req, res);
    advance(5);
    EXPECT_EQ(res->statuses.size(), 1u);
    return std::make_pair(res->statuses.empty() ? 0 : res->statuses[0],
                          res->bodies.empty() ? nlohmann::json() : nlohmann::json::parse(res->bodies[0]));
  };
  const std::vector<std::string> bad_holders = {
      "\"\"", "\"" + std::string(257, 'x') + "\"", "\"a\\u0007b\"", "\"caf\xc3\xa9\"", "12"};
  for (const std::string& bad : bad_holders) {
    SCOPED_TRACE(bad);
    auto [status, body] = call(acquire, post("x", "{\"holder\":" + bad + "}"));
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_NE(body.value("message", "").find("holder"), std::string::npos) << body.dump();
    EXPECT_FALSE(inspect("x").held) << "a refused acquire changes nothing";
  }
  auto [given, grant] = call(acquire, post("x", R"({"holder":"worker 3 ~ ok"})"));
  ASSERT_EQ(given, 200) << grant.dump();
  EXPECT_EQ(inspect("x").holder, "worker 3 ~ ok");
  EXPECT_GT(inspect("x").since_ms, 1'700'000'000'000);
  auto [busy, locked] = call(acquire, post("x", "{}"));
  EXPECT_EQ(busy, 409);
  EXPECT_EQ(locked["holder"], "worker 3 ~ ok") << locked.dump();
  http::Request read;
  read.method = "GET";
  read.params = {{"name", "x"}};
  auto [ok, state] = call(get, read);
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(state["holder"], "worker 3 ~ ok") << state.dump();
  EXPECT_EQ(state.dump().find(grant["owner"].get<std::string>()), std::string::npos);
  ASSERT_EQ(call(acquire, post("y", "{}")).first, 200);
  EXPECT_EQ(inspect("y").holder, "pod-a") << "no holder given: the sidecar's identity";
  ASSERT_EQ(call(acquire, post("z", R"({"holder":")" + std::string(256, '~') + R"("})")).first,
            200);
}

// A lease this sidecar saw lost answers lease_lost on release, whatever its kind: a fair lease
// too (its loss is remembered under the fair lock; the release route used to look only at the
// mutex once the fair lease had left the table, and answered not_held).
TEST_F(LockApiTest, AReleaseOfALostLeaseSaysLeaseLostForEveryKind) {
  LockApi lock_api(cfg, *svc, metrics, sched);
  http::Handler acquire;
  http::Handler release;
  http::Handler force_release;
  for (auto& r : lock_api.routes()) {
    if (r.pattern == "/v1/locks/{name}/acquire") acquire = r.handler;
    if (r.pattern == "/v1/locks/{name}/release") release = r.handler;
  }
  for (auto& r : lock_api.adminRoutes()) {
    if (r.pattern == "/admin/v1/locks/{name}/release") force_release = r.handler;
  }
  ASSERT_TRUE(acquire && release && force_release);
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"mutex", R"({"ttl_ms":60000})"},
      {"fair", R"({"ttl_ms":60000,"fair":true})"},
      {"reader", R"({"ttl_ms":60000,"mode":"shared"})"}};
  for (const auto& [name, body] : kinds) {
    SCOPED_TRACE(name);
    http::Request req = post(name, body);
    auto granted = std::make_shared<FakeResponder>(sched);
    acquire(req, granted);
    advance(10);
    ASSERT_EQ(granted->statuses, std::vector<int>{200});
    const std::string owner = nlohmann::json::parse(granted->bodies[0])["owner"];
    // An operator frees the lock: every holder this sidecar knows of is marked lost at once.
    http::Request admin = post(name, "");
    admin.principal = std::make_shared<http::Principal>(http::Principal{"admin token", {}});
    auto forced = std::make_shared<FakeResponder>(sched);
    force_release(admin, forced);
    advance(10);
    ASSERT_EQ(forced->statuses, std::vector<int>{200}) << forced->bodies[0];
    req.body = nlohmann::json{{"owner", owner}}.dump();
    auto released = std::make_shared<FakeResponder>(sched);
    release(req, released);
    advance(10);
    ASSERT_EQ(released->statuses, std::vector<int>{404});
    EXPECT_NE(released->bodies[0].find("\"lease_lost\""), std::string::npos)
        << released->bodies[0];
  }
}

}  // namespace
}  // namespace sidelock::api
