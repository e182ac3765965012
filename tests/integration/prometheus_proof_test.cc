// The proof for issue 5: a real Prometheus (Debian's `prometheus`) scrapes the real sidelock
// binary, which serves a small contended workload on a real redis-server. Then EVERY PromQL
// expression of the shipped dashboard and alert rules is evaluated through Prometheus's HTTP API;
// the test fails if one is invalid or selects no series. A dashboard that queries a metric sidelock
// does not export therefore fails here. The live /metrics text must also pass
// `promtool check metrics`.
//
// Rules applied to the expressions (documented in README.md, "Metrics", too):
// - Dashboard targets: Grafana variables are substituted ($__rate_interval -> 1m, $namespace /
//   $pod / $instance -> the labels of the scraped sidecar) and the query must return >= 1 series.
// - Dashboard variables `label_values(selector, label)`: the selector must return series that
//   carry the label.
// - Alert rules: the expression as written must be valid (it is legitimately empty while the alert
//   does not fire); with every comparison turned into its `bool` form (`x > 5` -> `x > bool 5`,
//   see promql::withBoolComparisons) it must return >= 1 series, i.e. its selectors match live
//   data. Prometheus must also report every loaded rule healthy after evaluating it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/prometheus_queries.h"
#include "support/child_process.h"
#include "support/http_client.h"
#include "support/lock_answers.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr char kNamespace[] = "sidelock-proof";
constexpr char kPod[] = "sidelock-proof-0";

// A Prometheus server on a free port with its own temp storage; killed and reaped in the
// destructor so no process outlives the test.
class PrometheusServer {
 public:
  PrometheusServer(int target_port, const std::string& rule_file) {
    dir_ = makeTempDir("sidelock-prometheus");
    const std::string config = dir_ + "/prometheus.yml";
    {
      std::ofstream out(config);
      out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
          << "rule_files:\n  - \"" << rule_file << "\"\n"
          << "scrape_configs:\n  - job_name: sidelock\n    static_configs:\n"
          << "      - targets: [\"127.0.0.1:" << target_port << "\"]\n"
          << "        labels:\n          namespace: " << kNamespace << "\n          pod: " << kPod
          << "\n";
    }
    for (int attempt = 0; attempt < 4; ++attempt) {
      port_ = pickFreePort();
      start(config);
      if (waitReady()) return;
      const std::string log = logs();
      stop();
      if (log.find("address already in use") == std::string::npos) {
        throw std::runtime_error("prometheus did not become ready:\n" + log);
      }
    }
    throw std::runtime_error("prometheus: no free port");
  }
  ~PrometheusServer() {
    stop();
    removeTree(dir_);
  }
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  std::string logs() const {
    std::ifstream in(dir_ + "/prometheus.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// GET /api/v1/<path>; returns the parsed JSON body (status "success" or "error").
  json api(const std::string& path_and_query) {
    HttpClient c = HttpClient::tcp(port_);
    HttpResponse r = c.get("/api/v1/" + path_and_query);
    json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      body = {{"status", "error"}, {"error", "HTTP " + std::to_string(r.status) + ": " + r.body}};
    }
    return body;
  }

  json query(const std::string& expr) { return api("query?query=" + promql::urlEncode(expr)); }

  /// Number of series (vector/matrix) or 1 for a scalar/string; -1 when the query failed.
  int seriesCount(const std::string& expr, std::string* error = nullptr) {
    const json r = query(expr);
    if (r.value("status", "") != "success") {
      if (error != nullptr) *error = r.value("error", r.dump());
      return -1;
    }
    const json& data = r["data"];
    if (data.value("resultType", "") == "scalar" || data.value("resultType", "") == "string") {
      return 1;
    }
    return static_cast<int>(data["result"].size());
  }

  /// The single value of an instant vector query with one series; NaN if not exactly one.
  double value(const std::string& expr) {
    const json r = query(expr);
    if (r.value("status", "") != "success" || r["data"]["result"].size() != 1) return NAN;
    return std::stod(r["data"]["result"][0]["value"][1].get<std::string>());
  }

 private:
  void start(const std::string& config) {
    const std::string log_path = dir_ + "/prometheus.log";
    const std::vector<std::string> args = {
        SIDELOCK_PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + dir_ + "/data",
        "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"};
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dieWithParent(parent);
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
  }

  bool waitReady() { return waitUntilServing(&pid_, port_, "/-/ready", 30'000, 50); }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Polls `done` every 100 ms until it holds or `timeout` passes.
bool waitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = steady_clock::now() + timeout;
  while (steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return done();
}

// A small contended workload touching every lock-level metric: grants, busy, waits behind a
// holder (contended, waiters), not_owner, extend, inspect, an expired lease, bad requests.
void runWorkload(int port) {
  const std::string hot = "/v1/locks/obs-hot";
  // A lock event stream watches the hot lock through the whole workload (the "Lock event
  // streams" panel): its first line is the state, then an event per change.
  HttpClient events = HttpClient::tcp(port);
  events.sendRequest("GET", hot + "/events");
  const std::optional<HttpResponse> events_head = events.readStreamHead(10000);
  ASSERT_TRUE(events_head.has_value());
  ASSERT_EQ(events_head->status, 200);
  ASSERT_TRUE(events.readStreamLine(10000).has_value()) << "no state line";
  HttpClient holder = HttpClient::tcp(port);
  HttpResponse r = holder.post(hot + "/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::optional<std::string> grant_event = events.readStreamLine(10000);
  ASSERT_TRUE(grant_event.has_value()) << "the stream saw no grant";
  EXPECT_NE(grant_event->find("\"acquired\""), std::string::npos) << *grant_event;
  const std::string owner = ownerOf(r);
  ASSERT_FALSE(owner.empty()) << r.body;

  HttpClient other = HttpClient::tcp(port);
  r = other.post(hot + "/acquire", R"({"ttl_ms":10000,"wait_ms":0})");
  EXPECT_EQ(r.status, 409) << r.body;  // busy
  r = other.post(hot + "/release", R"({"owner":"not-the-holder"})");
  EXPECT_EQ(r.status, 409) << r.body;  // not_owner

  // Three waiters queue behind the holder, then take turns.
  std::vector<std::thread> waiters;
  std::vector<int> acquired(3, 0), released(3, 0);
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      try {
        HttpClient c = HttpClient::tcp(port);
        HttpResponse a =
            c.request("POST", hot + "/acquire", R"({"ttl_ms":10000,"wait_ms":20000})", 30000);
        acquired[i] = a.status;
        if (a.status != 200) return;
        std::this_thread::sleep_for(milliseconds(100));
        released[i] = c.post(hot + "/release", json{{"owner", ownerOf(a)}}.dump()).status;
      } catch (const std::exception&) {
      }
    });
  }
  EXPECT_TRUE(waitForWaiters(other, "obs-hot", 3));
  EXPECT_EQ(other.get(hot).status, 200);  // inspect
  r = holder.post(hot + "/extend", json{{"owner", owner}, {"ttl_ms", 10000}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  r = holder.post(hot + "/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  for (auto& t : waiters) t.join();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(acquired[i], 200) << "waiter " << i;
    EXPECT_EQ(released[i], 200) << "waiter " << i;
  }

  // A lease that expires before its release: the late release answers 404 not_held.
  r = other.post("/v1/locks/obs-expire/acquire", R"({"ttl_ms":200})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string late_owner = ownerOf(r);
  // Expired in Redis and in the sidecar's own lease table (its expiry timer has fired), so the
  // release below finds no lease at all: not_held, not lease_lost.
  EXPECT_TRUE(pollUntil([&] {
    const json state = json::parse(other.get("/v1/locks/obs-expire").body, nullptr, false);
    const json listed = json::parse(other.get("/v1/locks").body, nullptr, false);
    if (!state.is_object() || state.value("held", true) || !listed.is_object()) return false;
    for (const auto& lease : listed["leases"]) {
      if (lease["name"] == "obs-expire") return false;
    }
    return true;
  }));
  r = other.post("/v1/locks/obs-expire/release", json{{"owner", late_owner}}.dump());
  EXPECT_EQ(r.status, 404) << r.body;

  // Bad input: 400 and 404 responses for the HTTP error panels.
  EXPECT_EQ(other.post(hot + "/acquire", "{not json").status, 400);
  EXPECT_EQ(other.get("/v1/no-such-route").status, 404);
}

std::string runPromtoolCheckMetrics(const std::string& text, int* exit_code) {
  char path[] = "/tmp/sidelock-live-metrics-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  std::string out = written ? "" : "short write\n";
  const std::string cmd = std::string(SIDELOCK_PROMTOOL) + " check metrics < " + path + " 2>&1";
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    const int status = pclose(p);
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  unlink(path);
  return out;
}

TEST(PrometheusProofTest, EveryDashboardAndAlertQueryReturnsSeriesFromALiveSidecar) {
  const std::string src = SIDELOCK_SOURCE_DIR;
  const std::string dashboard = promql::readFile(src + "/dashboards/sidelock-lock-health.json");
  const std::string rules_path = src + "/deploy/prometheus/sidelock-alerts.yaml";
  const std::string rules = promql::readFile(rules_path);

  RedisServer redis;
  // One configured election, so its gauges (the Elections row, SidelockElectionLeaderless)
  // have series: the sidecar leads it, and nothing fires.
  SidecarProcess sidecar({"backend:\n  type: redis\n  nodes: [\"" + redis.address() +
                              "\"]\n"
                              "log:\n  level: info\n"
                              "identity: proof-pod\n"
                              "elections: [{name: proof, ttl_ms: 5000}]\n",
                          {},
                          /*wait_ready=*/true});
  PrometheusServer prom(sidecar.port(), rules_path);
  const std::string instance = "127.0.0.1:" + std::to_string(sidecar.port());

  // First scrape, so counters have a sample before the workload moves them.
  ASSERT_TRUE(
      waitFor([&] { return prom.value("up{job=\"sidelock\"}") == 1; }, std::chrono::seconds(30)))
      << "Prometheus never scraped the sidecar.\n"
      << prom.query("up").dump() << "\n"
      << prom.logs();

  runWorkload(sidecar.port());
  if (HasFatalFailure()) return;

  // The live exposition text passes promtool's linter.
  {
    HttpClient c = HttpClient::tcp(sidecar.port());
    const HttpResponse m = c.get("/metrics");
    ASSERT_EQ(m.status, 200);
    int code = -1;
    const std::string lint = runPromtoolCheckMetrics(m.body, &code);
    EXPECT_EQ(code, 0) << lint;
    EXPECT_EQ(lint, "") << lint;
  }

  // Wait for three more scrapes: every series the workload created then has >= 2 samples, which
  // rate() over $__rate_interval needs. (Counting samples of all sidelock_* series at once is not
  // possible: count_over_time drops the names and the label sets collide.)
  const std::string scrapes = "count_over_time(up{job=\"sidelock\"}[10m])";
  const double scrapes_after_workload = prom.value(scrapes);
  ASSERT_TRUE(waitFor([&] { return prom.value(scrapes) >= scrapes_after_workload + 3; },
                      std::chrono::seconds(30)))
      << prom.logs();

  // The workload moved the counters it should (the scrape saw the metrics change).
  const std::string sel = "{job=\"sidelock\"}";
  // (kind="mutex": the configured election's campaign has series of its own, kind="election".)
  const std::string mutex = "{kind=\"mutex\",";
  EXPECT_GE(prom.value("sidelock_acquire_total" + mutex + "result=\"acquired\"}"), 5);
  EXPECT_GE(prom.value("sidelock_acquire_total" + mutex + "result=\"busy\"}"), 1);
  EXPECT_GE(prom.value("sidelock_acquire_contended_total{kind=\"mutex\"}"), 1);
  EXPECT_GE(prom.value("sidelock_release_total{result=\"not_owner\"}"), 1);
  EXPECT_GE(prom.value("sidelock_release_total{result=\"released\"}"), 4);
  EXPECT_GE(prom.value("sidelock_lease_expired_total" + sel), 1);
  EXPECT_GE(prom.value("sidelock_acquire_wait_seconds_count{kind=\"mutex\"}"), 5);
  EXPECT_EQ(prom.value("sidelock_backend_up{node=\"" + redis.address() + "\"}"), 1);
  EXPECT_EQ(prom.value("sidelock_backend_ready" + sel), 1);
  EXPECT_EQ(prom.value("sidelock_held_locks" + sel), 1);  // the configured election's lease
  // ... counted for its candidate, the sidecar's identity ("Held locks by holder").
  EXPECT_EQ(prom.value("sidelock_held_locks_by_holder{holder=\"proof-pod\"}"), 1);
  EXPECT_EQ(prom.value("sidelock_held_locks_by_holder{holder=\"other\"}"), 0);
  EXPECT_EQ(prom.value("sidelock_waiters" + sel), 0);
  EXPECT_EQ(prom.value("sidelock_election_leader{election=\"proof\"}"), 1);
  EXPECT_EQ(prom.value("sidelock_election_ttl_seconds{election=\"proof\"}"), 5);

  // The check itself can fail: an unknown metric selects nothing, invalid PromQL is an error.
  EXPECT_EQ(prom.seriesCount("sidelock_no_such_metric_total" + sel), 0);
  EXPECT_EQ(prom.seriesCount("sum(rate(sidelock_acquire_total[1m]"), -1);

  // Dashboard variables: label_values(selector, label) must find the label on live series.
  const std::map<std::string, std::string> vars = {
      {"__rate_interval", "1m"},    {"__interval", "1s"},      {"__range", "5m"},
      {"datasource", "prometheus"}, {"namespace", kNamespace}, {"pod", kPod},
      {"instance", instance}};
  const auto var_queries = promql::dashboardVariableQueries(dashboard);
  EXPECT_EQ(var_queries.size(), 3u);
  for (const auto& v : var_queries) {
    const std::string expr = promql::substituteVariables(v.selector, vars);
    const json r = prom.query(expr);
    ASSERT_EQ(r.value("status", ""), "success") << "variable " << v.variable << ": " << r.dump();
    ASSERT_FALSE(r["data"]["result"].empty()) << "variable " << v.variable << ": " << expr;
    for (const auto& s : r["data"]["result"]) {
      EXPECT_TRUE(s["metric"].contains(v.label)) << "variable " << v.variable << ": " << s.dump();
    }
  }

  // Every dashboard target.
  const auto panels = promql::dashboardQueries(dashboard);
  EXPECT_GE(panels.size(), 30u);
  int checked = 0;
  for (const auto& q : panels) {
    const std::string expr = promql::substituteVariables(q.expr, vars);
    ASSERT_EQ(expr.find('$'), std::string::npos) << q.origin << ": unknown variable in " << expr;
    std::string error;
    const int n = prom.seriesCount(expr, &error);
    EXPECT_GE(n, 1) << q.origin << (n < 0 ? " is invalid: " + error : " returns no series")
                    << "\n  " << expr;
    ++checked;
  }

  // Every alert rule: valid as written; its bool form selects live series.
  const auto alerts = promql::ruleQueries(rules);
  EXPECT_GE(alerts.size(), 8u);
  for (const auto& q : alerts) {
    std::string error;
    EXPECT_GE(prom.seriesCount(q.expr, &error), 0) << q.origin << " is invalid: " << error;
    const std::string probe = promql::withBoolComparisons(q.expr);
    const int n = prom.seriesCount(probe, &error);
    EXPECT_GE(n, 1) << q.origin << (n < 0 ? " is invalid: " + error : " selects no series")
                    << "\n  " << probe;
    ++checked;
  }
  std::cout << "[ proof    ] evaluated " << checked << " expressions against Prometheus\n";

  // Prometheus loaded the rule file and evaluates every rule without error.
  ASSERT_TRUE(waitFor(
      [&] {
        const json r = prom.api("rules");
        if (r.value("status", "") != "success") return false;
        size_t evaluated = 0;
        for (const auto& g : r["data"]["groups"]) {
          for (const auto& rule : g["rules"]) {
            if (rule.value("lastEvaluation", "").rfind("0001-", 0) != 0) ++evaluated;
          }
        }
        return evaluated == alerts.size();
      },
      std::chrono::seconds(15)))
      << prom.api("rules").dump();
  // Nothing that means "broken" is active in this healthy run. The one expiry the workload
  // provoked stays quiet: SidelockLeasesExpiringBeforeRelease wants a sustained rate (its firing
  // is tested by promtool_test_rules). SidelockFailedReleasesRising may be pending: the workload's
  // not_owner and not_held releases are a third of all releases.
  const json final_rules = prom.api("rules");
  for (const auto& g : final_rules["data"]["groups"]) {
    for (const auto& rule : g["rules"]) {
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
      const std::string name = rule.value("name", "");
      if (name != "SidelockFailedReleasesRising") {
        EXPECT_TRUE(rule["alerts"].empty()) << rule.dump();
      }
    }
  }

  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

}  // namespace
}  // namespace sidelock::testing
