// End-to-end tests of the v1 API: the real sidelock binary against real redis-server processes,
// over real TCP and Unix sockets.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

std::string redisYaml(const RedisServer& redis, const std::string& extra = "") {
  return "backend:\n  type: redis\n  nodes: [\"" + redis.address() +
         "\"]\n  command_timeout_ms: 300\n  connect_timeout_ms: 300\n  reconnect_min_ms: 20\n"
         "  reconnect_max_ms: 200\n  health_interval_ms: 100\n" +
         extra;
}

json body(const HttpResponse& r) { return json::parse(r.body); }

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sidecar_ = std::make_unique<SidecarProcess>(
        SidecarProcess::Options{redisYaml(redis_), {}, /*wait_ready=*/true});
  }
  void TearDown() override {
    if (sidecar_) {
      EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
    }
  }
  HttpClient client() { return HttpClient::tcp(sidecar_->port()); }

  RedisServer redis_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(ApiTest, AcquireInspectExtendRelease) {
  HttpClient c = client();
  auto r = c.post("/v1/locks/orders-42/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 200) << r.body;
  json grant = body(r);
  EXPECT_EQ(grant["name"], "orders-42");
  EXPECT_EQ(grant["ttl_ms"], 10000);
  std::string owner = grant["owner"];
  EXPECT_EQ(owner.size(), 32u);
  uint64_t token = grant["token"];
  EXPECT_GE(token, 1u);
  // Stored atomically with its TTL under the hash-tagged key.
  EXPECT_EQ(redis_.cli({"GET", "sidelock:{orders-42}"}), owner);
  int pttl = std::stoi(redis_.cli({"PTTL", "sidelock:{orders-42}"}));
  EXPECT_GT(pttl, 9000);

  r = c.get("/v1/locks/orders-42");
  ASSERT_EQ(r.status, 200);
  json state = body(r);
  EXPECT_EQ(state["held"], true);
  EXPECT_EQ(state["token"], token);
  EXPECT_GT(state["ttl_ms"].get<int64_t>(), 9000);
  EXPECT_EQ(r.body.find(owner), std::string::npos) << "inspect must never reveal the owner";

  r = c.post("/v1/locks/orders-42/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 409);
  EXPECT_EQ(body(r)["error"], "locked");
  EXPECT_GT(body(r)["retry_after_ms"].get<int64_t>(), 0);

  r = c.post("/v1/locks/orders-42/extend", json{{"owner", owner}, {"ttl_ms", 20000}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  // The answer is the lease's remaining TTL as Redis reports it right after PEXPIRE.
  EXPECT_LE(body(r)["ttl_ms"].get<int64_t>(), 20000);
  EXPECT_GE(body(r)["ttl_ms"].get<int64_t>(), 19000);
  EXPECT_GT(std::stoi(redis_.cli({"PTTL", "sidelock:{orders-42}"})), 15000);

  r = c.post("/v1/locks/orders-42/release", R"({"owner":"somebody-else"})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(body(r)["error"], "not_owner");
  r = c.post("/v1/locks/orders-42/extend", R"({"owner":"somebody-else","ttl_ms":100})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(redis_.cli({"GET", "sidelock:{orders-42}"}), owner)
      << "a foreign owner changed nothing";

  r = c.post("/v1/locks/orders-42/release", json{{"owner", owner}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body(r)["released"], true);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{orders-42}"}), "0");

  r = c.post("/v1/locks/orders-42/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(body(r)["error"], "not_held");
  r = c.post("/v1/locks/orders-42/extend", json{{"owner", owner}, {"ttl_ms", 1000}}.dump());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{orders-42}"}), "0") << "extend never re-creates";

  r = c.post("/v1/locks/orders-42/acquire", R"({"owner":"my-own-id-1"})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(body(r)["owner"], "my-own-id-1");
  EXPECT_GT(body(r)["token"].get<uint64_t>(), token) << "fencing tokens strictly increase";
  EXPECT_EQ(body(r)["ttl_ms"], 30000) << "default TTL from config";
}

TEST_F(ApiTest, LeaseExpires) {
  HttpClient c = client();
  auto r = c.post("/v1/locks/short/acquire", R"({"ttl_ms":100})");
  ASSERT_EQ(r.status, 200);
  std::string owner = body(r)["owner"];
  EXPECT_TRUE(pollUntil([&] { return body(c.get("/v1/locks/short"))["held"] == false; }))
      << "a 100 ms lease never expired";
  r = c.post("/v1/locks/short/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(r.status, 404);
  auto metrics = c.get("/metrics").body;
  EXPECT_NE(metrics.find("sidelock_lease_expired_total 1"), std::string::npos) << metrics;
}

TEST_F(ApiTest, UnixSocketServesTheSameApiWithItsMode) {
  struct stat st {};
  ASSERT_EQ(stat(sidecar_->socketPath().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  HttpClient u = HttpClient::unix(sidecar_->socketPath());
  auto r = u.post("/v1/locks/via-unix/acquire", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  r = client().get("/v1/locks/via-unix");
  EXPECT_EQ(body(r)["held"], true);
}

TEST_F(ApiTest, BadInputGetsClearErrorsAndChangesNothing) {
  HttpClient c = client();
  struct Case {
    std::string method, path, body;
    int status;
    std::string error;
  };
  std::string long_name(201, 'a');
  std::vector<Case> cases = {
      {"POST", "/v1/locks/x/acquire", "{not json", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", "[1,2]", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl_ms":"10"})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl_ms":0})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl_ms":1.5})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl_ms":99999999999999999999})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl_ms":-1})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"wait_ms":999999999})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"ttl":1000})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"owner":""})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"owner":"has space"})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"hold":"forever"})", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire", R"({"auto_renew":"yes"})", 400, "bad_request"},
      {"POST", "/v1/locks/bad%00name/acquire", "{}", 400, "invalid_name"},
      {"POST", "/v1/locks/bad%0Aname/acquire", "{}", 400, "invalid_name"},
      {"POST", "/v1/locks/br%7Bace%7D/acquire", "{}", 400, "invalid_name"},
      {"POST", "/v1/locks/" + long_name + "/acquire", "{}", 400, "invalid_name"},
      {"POST", "/v1/locks/x/release", "{}", 400, "bad_request"},
      {"POST", "/v1/locks/x/release", R"({"owner":5})", 400, "bad_request"},
      {"POST", "/v1/locks/x/extend", R"({"owner":"a","ttl_ms":0})", 400, "bad_request"},
      {"GET", "/v1/nothing", "", 404, "not_found"},
      {"GET", "/v1/locks/x/acquire", "", 405, "method_not_allowed"},
      {"DELETE", "/v1/locks/x", "", 405, "method_not_allowed"},
      // Query strings are read strictly on every v1 route: a key the route does not read, or one
      // given twice, is refused rather than ignored (or read first-wins).
      {"GET", "/v1/locks/x?extended=true", "", 400, "bad_request"},
      {"POST", "/v1/locks/x/acquire?ttl_ms=5000", "{}", 400, "bad_request"},
      {"GET", "/v1/locks/x/events?extended=true&extended=false", "", 400, "bad_request"},
      {"GET", "/v1/locks/x/events?extendd=true", "", 400, "bad_request"},
      {"GET", "/v1/locks?prefix=a", "", 400, "bad_request"},
      {"GET", "/v1/semaphores/s?limit=3", "", 400, "bad_request"},
      {"POST", "/v1/multilocks/acquire?wait_ms=1", R"({"names":["a"]})", 400, "bad_request"},
      {"GET", "/v1/elections/e?candidate=a", "", 400, "bad_request"},
      {"GET", "/v1/elections/e/ready?candidate=a&candidate=b", "", 400, "bad_request"},
  };
  for (const auto& tc : cases) {
    auto r = c.request(tc.method, tc.path, tc.body);
    EXPECT_EQ(r.status, tc.status)
        << tc.method << " " << tc.path << " " << tc.body << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_EQ(j["error"], tc.error) << tc.path << " " << tc.body;
    EXPECT_TRUE(j["message"].is_string());
  }
  // Nothing was written to Redis by any of them.
  EXPECT_EQ(redis_.cli({"DBSIZE"}), "0");
  // The message names the key and what the route takes.
  const auto unknown = c.request("GET", "/v1/locks/x/events?extendd=true", "");
  EXPECT_EQ(json::parse(unknown.body).value("message", ""),
            "unknown query parameter 'extendd' (this route takes: extended)");
  const auto twice = c.request("GET", "/v1/locks/x/events?extended=true&extended=false", "");
  EXPECT_EQ(json::parse(twice.body).value("message", ""),
            "query parameter 'extended' is given more than once");
  // Empty pairs are no parameters; probes and scrapes keep ignoring a query.
  EXPECT_EQ(c.request("GET", "/v1/locks/x?&", "").status, 200);
  EXPECT_EQ(c.request("GET", "/healthz?probe=1", "").status, 200);
  EXPECT_EQ(c.request("GET", "/metrics?x=1", "").status, 200);
  // A Host whose port is not digits is a bad request (RFC 9112 3.2), not "localhost".
  HttpClient raw = client();
  raw.sendRaw("GET /healthz HTTP/1.1\r\nHost: localhost:abc\r\n\r\n");
  const auto bad_host = raw.readResponse();
  ASSERT_TRUE(bad_host.has_value());
  EXPECT_EQ(bad_host->status, 400) << bad_host->body;
}

TEST_F(ApiTest, OversizedBodyAndHeadersAreRefused) {
  HttpClient c = client();
  auto r = c.post("/v1/locks/x/acquire", std::string(70000, ' '));
  EXPECT_EQ(r.status, 413);
  HttpClient c2 = client();
  c2.sendRaw("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  auto r2 = c2.readResponse();
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->status, 431);
  EXPECT_EQ(redis_.cli({"DBSIZE"}), "0");
}

TEST_F(ApiTest, PipelinedRequestsAreAnsweredInOrder) {
  HttpClient c = client();
  std::string pipeline;
  for (int i = 0; i < 10; ++i) {
    c.sendRequest("POST", "/v1/locks/pipe-" + std::to_string(i) + "/acquire", R"({"ttl_ms":5000})");
  }
  for (int i = 0; i < 10; ++i) {
    auto r = c.readResponse();
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->status, 200);
    EXPECT_EQ(body(*r)["name"], "pipe-" + std::to_string(i));
  }
}

TEST_F(ApiTest, WaitersAreServedInFifoOrderWhenTheHolderReleases) {
  HttpClient holder = client();
  auto r = holder.post("/v1/locks/fifo/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 200);
  std::string owner = body(r)["owner"];
  std::vector<HttpClient> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(client());
    waiters.back().sendRequest(
        "POST", "/v1/locks/fifo/acquire",
        json{{"ttl_ms", 10000}, {"wait_ms", 10000}, {"owner", "waiter-" + std::to_string(i)}}
            .dump());
    ASSERT_TRUE(waitForWaiters(holder, "fifo", i + 1));  // enqueued in a known order
  }
  auto listed = body(holder.get("/v1/locks"));
  ASSERT_EQ(listed["waiters"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["waiters"][0]["waiters"], 3);

  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(holder.post("/v1/locks/fifo/release", json{{"owner", owner}}.dump()).status, 200);
  for (int i = 0; i < 3; ++i) {
    auto got = waiters[i].readResponse(10000);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->status, 200) << got->body;
    EXPECT_EQ(body(*got)["owner"], "waiter-" + std::to_string(i));
    ASSERT_EQ(
        holder.post("/v1/locks/fifo/release", json{{"owner", "waiter-" + std::to_string(i)}}.dump())
            .status,
        200);
  }
  // Three hand-offs complete sooner than one 10 s TTL: waiters were woken, not timed out.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(10000));
}

TEST_F(ApiTest, WaitTimesOutWith409AndDisconnectedWaiterLeavesTheQueue) {
  HttpClient holder = client();
  ASSERT_EQ(holder.post("/v1/locks/busy/acquire", R"({"ttl_ms":10000})").status, 200);
  auto r = client().post("/v1/locks/busy/acquire", R"({"wait_ms":200})");
  EXPECT_EQ(r.status, 409);
  {
    HttpClient gone = client();
    gone.sendRequest("POST", "/v1/locks/busy/acquire", R"({"wait_ms":20000})");
    EXPECT_TRUE(waitForWaiters(holder, "busy", 1));
  }  // closes the socket
  EXPECT_TRUE(waitForWaiters(holder, "busy", 0)) << "the disconnected waiter stayed queued";
}

// Many clients doing read-modify-write of a counter under the lock lose no update, and the
// fencing tokens they see strictly increase in grant order.
TEST_F(ApiTest, ContendedReadModifyWriteLosesNoUpdate) {
  constexpr int kClients = 8;
  constexpr int kRounds = 15;
  std::atomic<int> failures{0};
  std::mutex mu;
  std::vector<uint64_t> tokens;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&] {
      HttpClient c = HttpClient::tcp(sidecar_->port());
      for (int i = 0; i < kRounds; ++i) {
        auto r = c.post("/v1/locks/counter/acquire", R"({"ttl_ms":5000,"wait_ms":20000})");
        if (r.status != 200) {
          ++failures;
          continue;
        }
        json g = json::parse(r.body);
        {
          std::lock_guard<std::mutex> lock(mu);
          tokens.push_back(g["token"]);
        }
        std::string v = redis_.cli({"GET", "counter"});
        int n = v.empty() ? 0 : std::stoi(v);
        redis_.cli({"SET", "counter", std::to_string(n + 1)});
        auto rel = c.post("/v1/locks/counter/release", json{{"owner", g["owner"]}}.dump());
        if (rel.status != 200) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(redis_.cli({"GET", "counter"}), std::to_string(kClients * kRounds));
  // Tokens were recorded in grant order under the lock: strictly increasing.
  ASSERT_EQ(tokens.size(), static_cast<size_t>(kClients * kRounds));
  for (size_t i = 1; i < tokens.size(); ++i) EXPECT_LT(tokens[i - 1], tokens[i]);
}

TEST_F(ApiTest, RedisDownGives503ThenRecoversWithoutRestart) {
  HttpClient c = client();
  redis_.kill();
  EXPECT_TRUE(pollUntil([&] { return c.get("/readyz").status == 503; }));
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.post("/v1/locks/down/acquire", "{}");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(body(r)["error"], "backend_unavailable");
  // Fails fast: within the command timeout (300 ms in redisYaml), with room for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300 * 5));
  auto ready = body(c.get("/readyz"));
  EXPECT_EQ(ready["error"], "not_ready");
  EXPECT_FALSE(ready["message"].get<std::string>().empty());

  redis_.restart();
  ASSERT_TRUE(pollUntil([&] { return c.get("/readyz").status == 200; })) << sidecar_->logs();
  EXPECT_EQ(c.post("/v1/locks/down/acquire", "{}").status, 200);
}

// Issue 22: Redis at maxmemory with noeviction refuses the acquire script's first write. The
// answer is a documented code with Redis's words, never the script's SHA or line (those go to
// the sidecar's log, once); a waiter rides it out like an outage; nothing is left written.
TEST_F(ApiTest, RedisOutOfMemoryIsBackendFullWithoutScriptInternals) {
  HttpClient c = client();
  ASSERT_EQ(redis_.cli({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
  ASSERT_EQ(redis_.cli({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  auto expectFull = [](const HttpResponse& r) {
    EXPECT_EQ(r.status, 503) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j.value("error", ""), "backend_full") << r.body;
    const std::string message = j.value("message", "");
    EXPECT_NE(message.find("is out of memory (maxmemory reached): OOM command not allowed"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("script"), std::string::npos) << message;
    EXPECT_FALSE(std::regex_search(message, std::regex("[0-9a-f]{40}"))) << message;
  };
  expectFull(c.post("/v1/locks/oom/acquire", "{}"));
  expectFull(c.post("/v1/locks/oom/acquire", R"({"wait_ms":300})"));
  EXPECT_EQ(redis_.cli({"DBSIZE"}), "0") << "nothing was written";

  ASSERT_EQ(redis_.cli({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  EXPECT_EQ(c.post("/v1/locks/oom/acquire", "{}").status, 200);
  ASSERT_EQ(sidecar_->stop(), 0);
  const std::string logs = sidecar_->logs();
  size_t logged = 0;
  for (size_t at = logs.find("redis.script_error"); at != std::string::npos;
       at = logs.find("redis.script_error", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << "logged once, not per request:\n" << logs;
  EXPECT_NE(logs.find("on @user_script:"), std::string::npos) << "the log keeps Redis's text";
  sidecar_.reset();
}

// Issue 10 finding 1: six clients loop acquire (5 s budget) / release while Redis is paused for
// a second. Every acquire must be granted: queued waiters ride out an outage shorter than their
// budget. (Releases sent during the pause may fail; those leases then run out their 1 s TTL.)
TEST_F(ApiTest, QueuedWaitersRideOutARedisPause) {
  constexpr int kClients = 6;
  std::atomic<int> granted{0};
  std::atomic<int> refused{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string first_refusal;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&] {
      HttpClient c = HttpClient::tcp(sidecar_->port());
      while (!stop) {
        auto r = c.post("/v1/locks/blip/acquire", R"({"ttl_ms":1000,"wait_ms":5000})");
        if (r.status != 200) {
          std::lock_guard<std::mutex> lock(mu);
          if (refused++ == 0) first_refusal = std::to_string(r.status) + " " + r.body;
          continue;
        }
        ++granted;
        c.post("/v1/locks/blip/release", json{{"owner", body(r)["owner"]}}.dump());
      }
    });
  }
  auto wait_granted = [&](int n) { return pollUntil([&] { return granted >= n; }); };
  EXPECT_TRUE(wait_granted(kClients));
  HttpClient observer = client();
  EXPECT_TRUE(pollUntil([&] { return queuedWaiters(observer, "blip") > 0; }))
      << "the clients were expected to queue behind each other";
  redis_.pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the outage itself
  const int granted_at_resume = granted;
  redis_.resume();
  EXPECT_TRUE(wait_granted(granted_at_resume + 2 * kClients)) << sidecar_->logs();
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0) << "first refusal: " << first_refusal;
}

TEST_F(ApiTest, WaiterWhoseBudgetEndsDuringAnOutageGets503) {
  HttpClient c = client();
  redis_.kill();
  constexpr int64_t kWaitMs = 600;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.post("/v1/locks/down/acquire", json{{"wait_ms", kWaitMs}}.dump());
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(body(r)["error"], "backend_unavailable");
  EXPECT_GE(elapsed, std::chrono::milliseconds(kWaitMs)) << "answered before its budget ended";
  // wait_ms 0 keeps failing fast (bounded by the connect timeout, far below any budget).
  r = c.post("/v1/locks/down/acquire", "{}");
  EXPECT_EQ(r.status, 503);
}

TEST_F(ApiTest, GracefulShutdownAnswersWaitersAndReleasesHeldLeases) {
  HttpClient c = client();
  ASSERT_EQ(c.post("/v1/locks/held/acquire", R"({"ttl_ms":60000})").status, 200);
  HttpClient waiter = client();
  waiter.sendRequest("POST", "/v1/locks/held/acquire", R"({"wait_ms":60000})");
  ASSERT_TRUE(waitForWaiters(c, "held", 1));
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{held}"}), "1");
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
  auto answered = waiter.readResponse(2000);
  ASSERT_TRUE(answered.has_value());
  EXPECT_EQ(answered->status, 503);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{held}"}), "0") << "held lease released on shutdown";
  sidecar_.reset();
}

TEST(ApiMemoryBackendTest, MemoryBackendServesTheApi) {
  SidecarProcess sidecar({"backend:\n  type: memory\n", {}, true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  auto r = c.post("/v1/locks/m/acquire", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(c.post("/v1/locks/m/acquire", "{}").status, 409);
  EXPECT_EQ(sidecar.stop(), 0);
  // Several replicas on the memory backend would each grant the same lock: start-up says so.
  const std::string logs = sidecar.logs();
  const size_t warning = logs.find("backend.memory_not_shared");
  ASSERT_NE(warning, std::string::npos) << logs;
  const std::string line = logs.substr(logs.rfind('\n', warning) + 1,
                                       logs.find('\n', warning) - logs.rfind('\n', warning) - 1);
  EXPECT_NE(line.find("warn"), std::string::npos) << line;
  EXPECT_NE(line.find("do not share locks"), std::string::npos) << line;
}

TEST(ApiLogTest, JsonLogsAreOneObjectPerLineAndNeverShowOwnerIds) {
  RedisServer redis;
  auto sidecar = std::make_unique<SidecarProcess>(SidecarProcess::Options{
      redisYaml(redis, "log:\n  level: debug\n  format: json\n"), {}, true});
  HttpClient c = HttpClient::tcp(sidecar->port());
  auto r = c.post("/v1/locks/logged/acquire", R"({"owner":"very-secret-owner-id"})");
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(c.post("/v1/locks/logged/release", R"({"owner":"very-secret-owner-id"})").status, 200);
  ASSERT_EQ(sidecar->stop(), 0);
  std::string logs = sidecar->logs();
  EXPECT_EQ(logs.find("very-secret-owner-id"), std::string::npos) << logs;
  std::set<std::string> events;
  size_t start = 0;
  while (start < logs.size()) {
    size_t end = logs.find('\n', start);
    if (end == std::string::npos) end = logs.size();
    std::string line = logs.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level")) << line;
    events.insert(j.value("event", ""));
  }
  for (const char* e : {"sidelock.started", "redis.up", "lock.granted", "lock.released",
                        "shutdown.begin", "shutdown.done"}) {
    EXPECT_EQ(events.count(e), 1u) << "missing event " << e << " in\n" << logs;
  }
}

TEST(CommandLineTest, CheckConfigNamesTheBadKey) {
  std::string dir = makeTempDir("sidelock-cli");
  std::string good = dir + "/good.yaml", bad = dir + "/bad.yaml";
  FILE* f = fopen(good.c_str(), "w");
  fputs(("listen:\n  unix: " + dir + "/s.sock\nbackend:\n  type: memory\n").c_str(), f);
  fclose(f);
  f = fopen(bad.c_str(), "w");
  fputs("locks:\n  default_ttl_ms: soon\n", f);
  fclose(f);
  std::string bin = sidelockBinary();
  EXPECT_EQ(system((bin + " --check-config " + good + " >/dev/null").c_str()), 0);
  std::string out = dir + "/out.txt";
  int rc = system((bin + " --check-config " + bad + " 2>" + out).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  FILE* o = fopen(out.c_str(), "r");
  char buf[512] = {0};
  fread(buf, 1, sizeof(buf) - 1, o);
  fclose(o);
  EXPECT_NE(std::string(buf).find("locks.default_ttl_ms"), std::string::npos) << buf;
  EXPECT_EQ(WEXITSTATUS(system((bin + " --version >/dev/null").c_str())), 0);
  EXPECT_EQ(WEXITSTATUS(system((bin + " --bogus 2>/dev/null").c_str())), 64);
  removeTree(dir);
}

}  // namespace
}  // namespace sidelock::testing
