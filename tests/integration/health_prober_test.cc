// The health prober on a real loop against a tiny HTTP server in the test (src/health/prober.h):
// results by kind, the unhealthy call after N failures in a row, one shared probe per URL, and a
// silent endpoint that times out without blocking the loop.
#include <gtest/gtest.h>
#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "event/uv_handle.h"
#include "event/uv_scheduler.h"
#include "health/prober.h"
#include "metrics/metrics.h"

namespace sidelock::health {
namespace {

/// Answers every connection with `answer` (empty: reads and never answers), on the test's loop.
class TinyServer {
 public:
  explicit TinyServer(uv_loop_t* loop) : loop_(loop) {
    uv_tcp_t* tcp = listener_.allocate(this);
    EXPECT_EQ(uv_tcp_init(loop, tcp), 0);
    sockaddr_in addr{};
    uv_ip4_addr("127.0.0.1", 0, &addr);
    EXPECT_EQ(uv_tcp_bind(tcp, reinterpret_cast<const sockaddr*>(&addr), 0), 0);
    EXPECT_EQ(uv_listen(reinterpret_cast<uv_stream_t*>(tcp), 16,
                        [](uv_stream_t* s, int) { static_cast<TinyServer*>(s->data)->accept(); }),
              0);
    sockaddr_storage bound{};
    int len = sizeof bound;
    uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/healthz"; }
  std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  int requests = 0;

 private:
  struct Client {
    TinyServer* server;
    event::UvHandle<uv_tcp_t> tcp;
    char buf[1024];
    std::string reply;
  };
  void accept() {
    auto client = std::make_unique<Client>();
    client->server = this;
    uv_tcp_t* tcp = client->tcp.allocate(client.get());
    uv_tcp_init(loop_, tcp);
    if (uv_accept(reinterpret_cast<uv_stream_t*>(listener_.get()),
                  reinterpret_cast<uv_stream_t*>(tcp)) != 0) {
      return;
    }
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(tcp),
        [](uv_handle_t* h, size_t, uv_buf_t* out) {
          auto* c = static_cast<Client*>(h->data);
          *out = uv_buf_init(c->buf, sizeof c->buf);
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t*) {
          auto* c = static_cast<Client*>(s->data);
          if (c == nullptr) return;
          if (n < 0) {
            c->tcp.close();
            return;
          }
          if (n == 0 || !c->reply.empty() || c->server->answer.empty()) return;
          ++c->server->requests;
          c->reply = c->server->answer;
          auto* w = new uv_write_t{};
          uv_buf_t b = uv_buf_init(c->reply.data(), static_cast<unsigned>(c->reply.size()));
          uv_write(w, s, &b, 1, [](uv_write_t* req, int) { delete req; });
        });
    clients_.push_back(std::move(client));
  }
  uv_loop_t* loop_;
  event::UvHandle<uv_tcp_t> listener_;
  std::vector<std::unique_ptr<Client>> clients_;
  int port_ = 0;
};

class HealthProberTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(uv_loop_init(&loop_), 0); }
  void TearDown() override {
    prober_.reset();
    server_.reset();
    scheduler_.reset();
    uv_run(&loop_, UV_RUN_DEFAULT);
    EXPECT_EQ(uv_loop_close(&loop_), 0);  // src/README.md, rule 9
  }
  void start() {
    scheduler_ = std::make_unique<event::UvScheduler>(&loop_);
    server_ = std::make_unique<TinyServer>(&loop_);
    prober_ = std::make_unique<Prober>(&loop_, *scheduler_, metrics_);
  }
  HealthSpec spec(const std::string& url, int64_t interval_ms, int failures) {
    auto parsed = parseProbeUrl(url);
    EXPECT_TRUE(parsed.isOk());
    return HealthSpec{*parsed, interval_ms, failures};
  }
  // Runs the loop until `done` or `budget_ms` passed (a timer keeps the loop from idling out).
  template <typename F>
  bool runUntil(F done, int64_t budget_ms) {
    const uint64_t end = uv_now(&loop_) + static_cast<uint64_t>(budget_ms);
    event::ScopedTimer tick;
    while (!done() && uv_now(&loop_) < end) {
      tick.start(*scheduler_, 10, [] {});
      uv_run(&loop_, UV_RUN_ONCE);
    }
    return done();
  }
  double value(prometheus::Counter& c) { return c.Value(); }

  uv_loop_t loop_{};
  metrics::Metrics metrics_;
  std::unique_ptr<event::UvScheduler> scheduler_;
  std::unique_ptr<TinyServer> server_;
  std::unique_ptr<Prober> prober_;
};

TEST_F(HealthProberTest, HealthyEndpointNeverCallsAndFailingOneCallsOnceAfterNFailures) {
  start();
  int calls = 0;
  HealthWatch watch = prober_->watch(spec(server_->url(), 100, 3), [&] { ++calls; });
  ASSERT_TRUE(runUntil([&] { return value(metrics_.health_probe_ok) >= 3; }, 3000));
  EXPECT_EQ(calls, 0);
  server_->answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
  const uint64_t failing_since = uv_now(&loop_);
  ASSERT_TRUE(runUntil([&] { return calls > 0; }, 3000));
  // 3 failures at 100 ms: within failures x interval plus a round trip (loosely).
  EXPECT_LE(uv_now(&loop_) - failing_since, 1000u);
  EXPECT_GE(value(metrics_.health_probe_failed), 3);
  runUntil([] { return false; }, 300);
  EXPECT_EQ(calls, 1);  // once, however long it stays failing
}

// A lasting watch (a pod's election): told unhealthy, then healthy at the first probe that
// succeeds, then unhealthy again after N fresh failures.
TEST_F(HealthProberTest, ALastingWatchIsToldEachTurnOfHealth) {
  start();
  const std::string failing = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
  const std::string healthy = server_->answer;
  int sick = 0;
  int well = 0;
  HealthWatch watch = prober_->watch(
      spec(server_->url(), 100, 2), [&] { ++sick; }, [&] { ++well; });
  server_->answer = failing;
  ASSERT_TRUE(runUntil([&] { return sick == 1; }, 3000));
  EXPECT_EQ(well, 0);
  server_->answer = healthy;
  ASSERT_TRUE(runUntil([&] { return well == 1; }, 3000));
  runUntil([] { return false; }, 300);
  EXPECT_EQ(well, 1) << "told once per recovery";
  server_->answer = failing;
  ASSERT_TRUE(runUntil([&] { return sick == 2; }, 3000));
  EXPECT_EQ(well, 1);
}

// The operator's limits (config `health`): ports and distinct probes.
TEST_F(HealthProberTest, AdmitChecksAllowedPortsAndMaxProbes) {
  scheduler_ = std::make_unique<event::UvScheduler>(&loop_);
  server_ = std::make_unique<TinyServer>(&loop_);
  const HealthSpec first = spec(server_->url(), 100, 3);
  prober_ = std::make_unique<Prober>(&loop_, *scheduler_, metrics_,
                                     HealthLimits{{first.url.port}, /*max_probes=*/1});
  EXPECT_TRUE(prober_->admit(first).isOk());
  const Status port = prober_->admit(spec("http://127.0.0.1:1/", 100, 3));
  EXPECT_EQ(port.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(port.message().find("health.allowed_ports"), std::string::npos) << port.message();
  HealthWatch watch = prober_->watch(first, [] {});
  EXPECT_TRUE(prober_->admit(first).isOk()) << "sharing the running probe";
  const Status full = prober_->admit(spec(server_->url(), 200, 3));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("health.max_probes"), std::string::npos) << full.message();
  watch.reset();
  EXPECT_TRUE(prober_->admit(spec(server_->url(), 200, 3)).isOk()) << "room once it ended";
}

TEST_F(HealthProberTest, FailuresInTheGraceDoNotCount) {
  start();
  server_->answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
  int calls = 0;
  HealthSpec graced = spec(server_->url(), 100, 2);
  graced.grace_ms = 700;
  const uint64_t since = uv_now(&loop_);
  HealthWatch watch = prober_->watch(graced, [&] { ++calls; });
  ASSERT_TRUE(runUntil([&] { return calls > 0; }, 3000));
  // Failing from the start: told only after the grace plus two counted failures.
  EXPECT_GE(uv_now(&loop_) - since, 700u);
  EXPECT_GE(value(metrics_.health_probe_failed), 4);  // probed (and counted) during the grace
}

TEST_F(HealthProberTest, ShutdownStopsEveryProbeAndWatchesStayHarmless) {
  start();
  int calls = 0;
  HealthWatch watch = prober_->watch(spec(server_->url(), 100, 1), [&] { ++calls; });
  EXPECT_EQ(prober_->activeProbes(), 1u);
  prober_->shutdown();
  EXPECT_EQ(prober_->activeProbes(), 0u);
  runUntil([] { return false; }, 300);
  EXPECT_EQ(calls, 0);
  watch.reset();  // after shutdown: nothing to stop, no crash
}

TEST_F(HealthProberTest, OneProbePerUrlSharedByEveryWatchAndStoppedWithTheLast) {
  start();
  int calls = 0;
  std::vector<HealthWatch> watches;
  for (int i = 0; i < 5; ++i) {
    watches.push_back(prober_->watch(spec(server_->url(), 200, 2), [&] { ++calls; }));
  }
  EXPECT_EQ(prober_->activeProbes(), 1u);
  ASSERT_TRUE(runUntil([&] { return server_->requests >= 3; }, 3000));
  // Five watches, one probe: requests follow the interval, not the number of watches.
  EXPECT_LE(server_->requests, 4);
  watches.erase(watches.begin(), watches.begin() + 4);
  EXPECT_EQ(prober_->activeProbes(), 1u);
  watches.clear();
  EXPECT_EQ(prober_->activeProbes(), 0u);
  const int before = server_->requests;
  runUntil([] { return false; }, 500);
  EXPECT_LE(server_->requests, before + 1);  // at most the one already in flight
  EXPECT_EQ(calls, 0);
}

TEST_F(HealthProberTest, RefusedAndSilentEndpointsFailWithoutBlockingTheLoop) {
  start();
  // A port nobody listens on: take the server's, then close it.
  const std::string refused_url = server_->url();
  server_.reset();
  server_ = std::make_unique<TinyServer>(&loop_);
  server_->answer.clear();  // accepts, reads, never answers
  int refused_calls = 0;
  int silent_calls = 0;
  HealthWatch refused = prober_->watch(spec(refused_url, 100, 2), [&] { ++refused_calls; });
  HealthWatch silent = prober_->watch(spec(server_->url(), 300, 2), [&] { ++silent_calls; });
  // The loop keeps turning meanwhile: count our own ticks while the silent probe waits.
  int ticks = 0;
  event::ScopedTimer ticker;
  std::function<void()> tick = [&] {
    ++ticks;
    ticker.start(*scheduler_, 20, tick);
  };
  ticker.start(*scheduler_, 20, tick);
  ASSERT_TRUE(runUntil([&] { return refused_calls > 0 && silent_calls > 0; }, 4000));
  ticker.reset();
  EXPECT_GE(value(metrics_.health_probe_refused), 2);
  EXPECT_GE(value(metrics_.health_probe_timeout), 2);
  EXPECT_GE(ticks, 10);  // two 300 ms timeouts passed while the loop served other timers
}

TEST_F(HealthProberTest, RedirectsOversizedAndGarbageAnswersAreFailures) {
  start();
  for (const std::string& answer : {
           std::string("HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\n\r\n"),
           std::string("HTTP/1.1 200 OK\r\nX-Pad: ") + std::string(20000, 'a') + "\r\n\r\n",
           std::string("not http at all\r\n\r\n"),
       }) {
    server_->answer = answer;
    int calls = 0;
    HealthWatch watch = prober_->watch(spec(server_->url(), 100, 1), [&] { ++calls; });
    ASSERT_TRUE(runUntil([&] { return calls > 0; }, 2000)) << answer.substr(0, 40);
  }
  EXPECT_EQ(value(metrics_.health_probe_ok), 0);
  EXPECT_GE(value(metrics_.health_probe_failed), 3);
}

}  // namespace
}  // namespace sidelock::health
