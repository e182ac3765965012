// Access control on a real sidecar (README "Access control"): browser checks (Origin, Host) on the
// lock listeners and not on the admin listener, bearer tokens with lock-name prefixes and their
// SIGHUP reload, the admin listener's own token, and how the Unix socket is created (mode, group,
// stale and live socket files, path length). curl itself is used where its defaults matter.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

constexpr const char* kFullToken = "FullAccessToken0123456789abcdefXYZ";
constexpr const char* kOrdersToken = "OrdersOnlyToken0123456789abcdefXYZ";
constexpr const char* kJobsToken = "JobsOnlyToken0123456789abcdefXYZ";
constexpr const char* kNewToken = "RotatedInToken0123456789abcdefXYZ";
constexpr const char* kAdminToken = "AdminScrapeToken0123456789abcdefXYZ";

/// One request with exactly these header lines (Host included by the caller).
HttpResponse send(HttpClient& c, const std::string& method, const std::string& path,
                  const std::vector<std::string>& headers, const std::string& body = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\n";
  for (const auto& h : headers) r += h + "\r\n";
  if (method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "\r\n" + body;
  c.sendRaw(r);
  auto response = c.readResponse();
  if (!response) ADD_FAILURE() << "no response to " << method << " " << path;
  return response.value_or(HttpResponse{});
}

std::string errorOf(const HttpResponse& r) {
  auto j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : "";
}

std::string bearer(const char* token) { return std::string("Authorization: Bearer ") + token; }

/// Runs `command` in a shell; its exit status, and its output in `out`.
int shell(const std::string& command, std::string* out) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  out->clear();
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Runs the sidecar binary with a config file in `dir`; for start-ups that must fail.
int runSidelock(const std::string& dir, const std::string& flag, const std::string& yaml,
                std::string* out) {
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << yaml;
  return shell("timeout 30 " + sidelockBinary() + " " + flag + " " + path, out);
}

TEST(AccessControlTest, BrowsersAreRefusedOnTheLockListenersAndCurlDefaultsWork) {
  const int admin_port = pickFreePort();
  SidecarProcess sidecar({"backend:\n  type: memory\n",
                          {},
                          false,
                          "  admin: \"127.0.0.1:" + std::to_string(admin_port) +
                              "\"\n  allowed_origins: [\"http://localhost:3000\"]\n"
                              "  allowed_hosts: [\"sidelock.test\"]\n"});
  const std::string port = std::to_string(sidecar.port());
  HttpClient c = HttpClient::tcp(sidecar.port());

  // curl's defaults: no -H, so Host: 127.0.0.1:port, no Origin, form content type.
  std::string out;
  ASSERT_EQ(shell("curl -s -w ' %{http_code}' -d '{\"ttl_ms\":60000}' http://127.0.0.1:" + port +
                      "/v1/locks/by-curl/acquire",
                  &out),
            0);
  EXPECT_NE(out.find("\"token\""), std::string::npos) << out;
  EXPECT_NE(out.find(" 200"), std::string::npos) << out;
  ASSERT_EQ(shell("curl -s -w ' %{http_code}' -H 'Origin: http://evil.example' -d '{}' "
                  "http://localhost:" +
                      port + "/v1/locks/by-page/acquire",
                  &out),
            0);
  EXPECT_NE(out.find("origin_not_allowed"), std::string::npos) << out;
  EXPECT_NE(out.find(" 403"), std::string::npos) << out;

  // A page's text/plain POST (no preflight) from an origin that is not allowed.
  for (const char* origin : {"http://evil.example", "null", "http://localhost:3001"}) {
    auto r = send(
        c, "POST", "/v1/locks/by-page/acquire",
        {"Host: localhost:" + port, std::string("Origin: ") + origin, "Content-Type: text/plain"},
        "{}");
    EXPECT_EQ(r.status, 403) << origin;
    EXPECT_EQ(errorOf(r), "origin_not_allowed") << r.body;
  }
  // DNS rebinding: the page's own name in Host.
  auto r = send(c, "POST", "/v1/locks/by-page/acquire",
                {"Host: attacker.example:" + port, "Content-Type: text/plain"}, "{}");
  EXPECT_EQ(r.status, 421);
  EXPECT_EQ(errorOf(r), "host_not_allowed") << r.body;
  // An absolute-form target's host is the request's host, whatever Host says (RFC 9112 3.2.2).
  HttpClient absolute = HttpClient::tcp(sidecar.port());
  r = send(absolute, "POST", "http://attacker.example:" + port + "/v1/locks/by-page/acquire",
           {"Host: localhost:" + port, "Content-Type: text/plain"}, "{}");
  EXPECT_EQ(r.status, 421) << r.body;
  HttpClient absolute_10 = HttpClient::tcp(sidecar.port());  // HTTP/1.0: no Host at all
  absolute_10.sendRaw("GET http://attacker.example:" + port + "/v1/locks/by-page HTTP/1.0\r\n\r\n");
  std::optional<HttpResponse> no_host = absolute_10.readResponse();
  ASSERT_TRUE(no_host.has_value());
  EXPECT_EQ(no_host->status, 421) << no_host->body;
  HttpClient absolute_ok = HttpClient::tcp(sidecar.port());
  r = send(absolute_ok, "GET", "http://localhost:" + port + "/v1/locks/by-page",
           {"Host: attacker.example"});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(c.get("/v1/locks/by-page").body)["held"], false) << "nothing changed";

  // Allowed origin and configured host name.
  r = send(c, "POST", "/v1/locks/from-app/acquire",
           {"Host: localhost:" + port, "Origin: http://localhost:3000"}, "{}");
  EXPECT_EQ(r.status, 200) << r.body;
  r = send(c, "GET", "/v1/locks/from-app", {"Host: sidelock.test:" + port});
  EXPECT_EQ(r.status, 200) << r.body;
  r = send(c, "GET", "/v1/locks/from-app", {"Host: [::1]:" + port});
  EXPECT_EQ(r.status, 200) << r.body;

  // The Unix socket is a lock listener too.
  HttpClient u = HttpClient::unix(sidecar.socketPath());
  r = send(u, "GET", "/v1/locks", {"Host: attacker.example"});
  EXPECT_EQ(r.status, 421);
  // The admin listener is reached by pod IP (probes, Prometheus): no browser checks there.
  HttpClient admin = HttpClient::tcp(admin_port);
  r = send(admin, "GET", "/healthz", {"Host: 10.1.2.3:" + std::to_string(admin_port)});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = makeTempDir("sidelock-tokens");
    tokens_file_ = dir_ + "/tokens";
    std::ofstream(tokens_file_) << "# lock tokens\n"
                                << kFullToken << "\n"
                                << kOrdersToken << " prefixes=orders-,jobs:\n"
                                << kJobsToken << " prefixes=jobs-\n";
    admin_port_ = pickFreePort();
    sidecar_ = std::make_unique<SidecarProcess>(
        SidecarProcess::Options{"backend:\n  type: memory\nauth:\n  tokens_file: " + tokens_file_ +
                                    "\n  admin_tokens_env: SIDELOCK_TEST_ADMIN_TOKENS\n",
                                {std::string("SIDELOCK_TEST_ADMIN_TOKENS=") + kAdminToken},
                                false,
                                "  admin: \"127.0.0.1:" + std::to_string(admin_port_) + "\"\n"});
  }
  void TearDown() override {
    if (sidecar_) {
      EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
      const std::string logs = sidecar_->logs();
      for (const char* t : {kFullToken, kOrdersToken, kJobsToken, kNewToken, kAdminToken}) {
        EXPECT_EQ(logs.find(t), std::string::npos) << "a token was logged";
      }
    }
    removeTree(dir_);
  }
  HttpResponse call(const std::string& method, const std::string& path, const char* token,
                    const std::string& body = "{}") {
    HttpClient c = HttpClient::tcp(sidecar_->port());
    std::vector<std::string> headers = {"Host: localhost"};
    if (token != nullptr) headers.push_back(bearer(token));
    return send(c, method, path, headers, method == "POST" ? body : "");
  }

  std::string dir_;
  std::string tokens_file_;
  int admin_port_ = 0;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(TokenTest, TcpRequiresAValidTokenAndPrefixesLimitLockNames) {
  auto r = call("POST", "/v1/locks/orders-1/acquire", nullptr);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(errorOf(r), "token_required");
  EXPECT_EQ(r.headers["www-authenticate"].rfind("Bearer", 0), 0u) << r.headers["www-authenticate"];
  r = call("POST", "/v1/locks/orders-1/acquire", "WrongToken0123456789abcdefXYZ");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(errorOf(r), "invalid_token");
  EXPECT_NE(r.headers["www-authenticate"].find("invalid_token"), std::string::npos);
  r = call("GET", "/v1/locks/orders-1", kFullToken);
  EXPECT_EQ(json::parse(r.body)["held"], false) << "refused requests changed nothing";

  r = call("POST", "/v1/locks/orders-1/acquire", kOrdersToken);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string orders_owner = json::parse(r.body)["owner"];
  r = call("POST", "/v1/locks/billing-1/acquire", kFullToken);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string billing_owner = json::parse(r.body)["owner"];

  // Outside its prefixes the scoped token gets 403 on every lock route, even with the owner id.
  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/locks/billing-1/acquire", "{}"},
           {"POST", "/v1/locks/billing-1/release", json{{"owner", billing_owner}}.dump()},
           {"POST", "/v1/locks/billing-1/extend", json{{"owner", billing_owner}}.dump()},
           {"GET", "/v1/locks/billing-1", ""},
           {"GET", "/v1/locks/billing-1/events", ""},
           {"POST", "/v1/locks/orders/acquire", "{}"}}) {
    r = call(method, path, kOrdersToken, body);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
    EXPECT_EQ(errorOf(r), "lock_not_allowed");
  }
  EXPECT_EQ(json::parse(call("GET", "/v1/locks/billing-1", kFullToken).body)["held"], true)
      << "the scoped token could not release it";
  r = call("POST", "/v1/locks/jobs:nightly/acquire", kOrdersToken);
  EXPECT_EQ(r.status, 200) << r.body;

  // The listing is filtered to the token's names.
  auto names = [](const HttpResponse& list) {
    std::vector<std::string> out;
    const json parsed = json::parse(list.body);
    for (const auto& l : parsed["leases"]) out.push_back(l["name"]);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(names(call("GET", "/v1/locks", kOrdersToken)),
            (std::vector<std::string>{"jobs:nightly", "orders-1"}));
  EXPECT_EQ(names(call("GET", "/v1/locks", kFullToken)),
            (std::vector<std::string>{"billing-1", "jobs:nightly", "orders-1"}));
  r = call("POST", "/v1/locks/orders-1/release", kOrdersToken,
           json{{"owner", orders_owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;

  // Probes need no token; metrics on the lock listener do.
  EXPECT_EQ(call("GET", "/healthz", nullptr).status, 200);
  EXPECT_EQ(call("GET", "/readyz", nullptr).status, 200);
  EXPECT_EQ(call("GET", "/metrics", nullptr).status, 401);
}

/// A streaming request (campaign, observe) sent with `token`: the client, its head read.
struct TokenStream {
  HttpClient client;
  HttpResponse head;
  std::optional<json> next() {
    std::optional<std::string> line = client.readStreamLine(5000);
    if (!line) return std::nullopt;
    return json::parse(*line);
  }
};

TokenStream openStream(int port, const std::string& method, const std::string& path,
                       const char* token, const std::string& body = "") {
  TokenStream s{HttpClient::tcp(port), {}};
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n" + bearer(token) + "\r\n";
  if (method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  s.client.sendRaw(r + "\r\n" + body);
  std::optional<HttpResponse> head = s.client.readStreamHead(5000);
  if (!head) ADD_FAILURE() << "no answer to " << method << " " << path;
  s.head = head.value_or(HttpResponse{});
  return s;
}

// Token prefixes apply to election names as to lock names: a token for `jobs-` runs a whole
// election of jobs-x (campaign, who leads, observe, proclaim, ready, resign) and gets 403
// lock_not_allowed on every election route of another name, even with that leader's owner id.
TEST_F(TokenTest, PrefixesLimitElectionNames) {
  const int port = sidecar_->port();
  TokenStream jobs = openStream(port, "POST", "/v1/elections/jobs-x/campaign", kJobsToken,
                                R"({"candidate":"pod-a","value":"10.0.0.1"})");
  ASSERT_EQ(jobs.head.status, 200) << jobs.head.body;
  std::optional<json> elected = jobs.next();
  ASSERT_TRUE(elected.has_value());
  ASSERT_EQ((*elected)["event"], "elected");
  const std::string jobs_owner = (*elected)["owner"];
  TokenStream other = openStream(port, "POST", "/v1/elections/other/campaign", kFullToken,
                                 R"({"candidate":"pod-b"})");
  ASSERT_EQ(other.head.status, 200) << other.head.body;
  std::optional<json> other_elected = other.next();
  ASSERT_TRUE(other_elected.has_value());
  const std::string other_owner = (*other_elected)["owner"];

  auto r = call("GET", "/v1/elections/jobs-x", kJobsToken);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["leader"]["candidate"], "pod-a");
  TokenStream watch = openStream(port, "GET", "/v1/elections/jobs-x/observe", kJobsToken);
  EXPECT_EQ(watch.head.status, 200) << watch.head.body;
  std::optional<json> first = watch.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)["candidate"], "pod-a");
  r = call("POST", "/v1/elections/jobs-x/proclaim", kJobsToken,
           json{{"owner", jobs_owner}, {"value", "10.0.0.2"}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(call("GET", "/v1/elections/jobs-x/ready?candidate=pod-a", kJobsToken).status, 200);

  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/elections/other/campaign", R"({"candidate":"pod-c"})"},
           {"GET", "/v1/elections/other", ""},
           {"GET", "/v1/elections/other/observe", ""},
           {"POST", "/v1/elections/other/proclaim",
            json{{"owner", other_owner}, {"value", "hijacked"}}.dump()},
           {"POST", "/v1/elections/other/resign", json{{"owner", other_owner}}.dump()},
           {"GET", "/v1/elections/other/ready?candidate=pod-b", ""},
           {"GET", "/v1/elections/jobs/ready?candidate=pod-b", ""},
           {"POST", "/v1/elections/jobs:x/campaign", R"({"candidate":"pod-c"})"}}) {
    r = call(method, path, kJobsToken, body);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
    EXPECT_EQ(errorOf(r), "lock_not_allowed") << path;
    EXPECT_NE(r.body.find("jobs-"), std::string::npos) << "names the allowed prefix: " << r.body;
  }
  // Nothing changed for `other`, and no token at all is still 401 on the election routes.
  r = call("GET", "/v1/elections/other", kFullToken);
  EXPECT_EQ(json::parse(r.body)["leader"]["candidate"], "pod-b") << r.body;
  EXPECT_EQ(json::parse(r.body)["leader"]["value"], "") << "the refused proclaim wrote nothing";
  r = call("GET", "/v1/elections/jobs-x", nullptr);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(errorOf(r), "token_required");
  // The listing shows a scoped token only its own elections.
  const json listed = json::parse(call("GET", "/v1/locks", kJobsToken).body);
  EXPECT_NE(listed.dump().find("jobs-x"), std::string::npos) << listed.dump();
  EXPECT_EQ(listed.dump().find("other"), std::string::npos) << listed.dump();

  r = call("POST", "/v1/elections/jobs-x/resign", kJobsToken, json{{"owner", jobs_owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  std::optional<json> end = jobs.next();
  while (end && (*end)["event"] == "renewed") end = jobs.next();
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ((*end)["event"], "resigned");
  EXPECT_EQ(call("GET", "/v1/elections/jobs-x/ready?candidate=pod-a", kJobsToken).status, 503);
}

TEST_F(TokenTest, AdminListenerHasItsOwnToken) {
  HttpClient admin = HttpClient::tcp(admin_port_);
  auto r = send(admin, "GET", "/metrics", {"Host: 10.0.0.7"});
  EXPECT_EQ(r.status, 401);
  r = send(admin, "GET", "/metrics", {"Host: 10.0.0.7", bearer(kFullToken)});
  EXPECT_EQ(r.status, 401) << "a lock token is not an admin token";
  r = send(admin, "GET", "/metrics", {"Host: 10.0.0.7", bearer(kAdminToken)});
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("sidelock_"), std::string::npos);
  r = send(admin, "GET", "/readyz", {"Host: 10.0.0.7"});
  EXPECT_EQ(r.status, 200) << "the kubelet sends no token";
  // The app container's leader-only readiness probe (helm: sidelock.electionReadinessProbe):
  // on the admin port by pod IP, without a token; nobody leads, so 503 rather than 401 or 404.
  r = send(admin, "GET", "/v1/elections/scheduler/ready?candidate=pod-a", {"Host: 10.0.0.7"});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("not_leader"), std::string::npos) << r.body;
  r = send(admin, "POST", "/v1/elections/scheduler/campaign", {"Host: 10.0.0.7"});
  EXPECT_EQ(r.status, 401) << "no other election route is token-free there";
  EXPECT_EQ(call("GET", "/metrics", kAdminToken).status, 401) << "and the other way round";
}

TEST_F(TokenTest, SighupReloadsTokensAndABadFileKeepsTheOldSet) {
  std::ofstream(tokens_file_) << kNewToken << "\n";
  ASSERT_EQ(::kill(sidecar_->pid(), SIGHUP), 0);
  EXPECT_TRUE(pollUntil([&] { return call("GET", "/v1/locks/x", kNewToken).status == 200; }))
      << sidecar_->logs();
  EXPECT_EQ(call("GET", "/v1/locks/x", kFullToken).status, 401) << "removed tokens stop working";
  EXPECT_NE(sidecar_->logs().find("auth.tokens_reloaded"), std::string::npos);

  std::ofstream(tokens_file_) << "too-short\n" << kFullToken << "\n";
  ASSERT_EQ(::kill(sidecar_->pid(), SIGHUP), 0);
  EXPECT_TRUE(pollUntil([&] {
    return sidecar_->logs().find("auth.tokens_reload_failed") != std::string::npos;
  })) << sidecar_->logs();
  EXPECT_NE(sidecar_->logs().find("line 1"), std::string::npos) << "the log names the line";
  EXPECT_EQ(call("GET", "/v1/locks/x", kNewToken).status, 200) << "the old set is kept";
  EXPECT_EQ(call("GET", "/v1/locks/x", kFullToken).status, 401);
}

TEST_F(TokenTest, SidelockRunSendsTheTokenFromItsEnvironment) {
  const std::string run = "timeout 60 " + sidelockBinary() +
                          " run --addr 127.0.0.1:" + std::to_string(sidecar_->port()) +
                          " --wait 0 ";
  std::string out;
  EXPECT_EQ(shell("SIDELOCK_AUTH_TOKEN=" + std::string(kOrdersToken) + " " + run +
                      "orders-run -- sh -c 'echo token=$SIDELOCK_TOKEN'",
                  &out),
            0)
      << out;
  EXPECT_NE(out.find("token="), std::string::npos) << out;
  EXPECT_EQ(shell(run + "orders-run -- true", &out), 77) << out;
  EXPECT_NE(out.find("token_required"), std::string::npos) << out;
  EXPECT_EQ(
      shell("SIDELOCK_AUTH_TOKEN=" + std::string(kOrdersToken) + " " + run + "billing-run -- true",
            &out),
      77)
      << out;
  EXPECT_NE(out.find("lock_not_allowed"), std::string::npos) << out;
}

TEST_F(TokenTest, UnixSocketNeedsATokenOnlyWhenConfigured) {
  HttpClient u = HttpClient::unix(sidecar_->socketPath());
  auto r = send(u, "POST", "/v1/locks/orders-9/acquire", {"Host: localhost"}, "{}");
  EXPECT_EQ(r.status, 200) << "the socket's mode decides who connects: " << r.body;
  r = send(u, "GET", "/v1/locks/anything", {"Host: localhost", bearer(kOrdersToken)});
  EXPECT_EQ(r.status, 403) << "a token that is sent still limits the names";
  EXPECT_EQ(call("POST", "/v1/locks/orders-9/acquire", nullptr).status, 401) << "TCP still does";

  SidecarProcess strict({"backend:\n  type: memory\nauth:\n  tokens_file: " + tokens_file_ +
                             "\n  unix_requires_token: true\n",
                         {},
                         false});
  HttpClient su = HttpClient::unix(strict.socketPath());
  r = send(su, "GET", "/v1/locks", {"Host: localhost"});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(errorOf(r), "token_required");
  r = send(su, "GET", "/v1/locks", {"Host: localhost", bearer(kFullToken)});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(strict.stop(), 0) << strict.logs();
}

TEST(UnixSocketTest, PeerUidAllowList) {
  const std::string me = std::to_string(getuid());
  const std::string other = std::to_string(getuid() + 1);
  SidecarProcess refused(
      {"backend:\n  type: memory\n", {}, false, "  unix_allowed_uids: [" + other + "]\n"});
  HttpClient u = HttpClient::unix(refused.socketPath());
  auto r = send(u, "POST", "/v1/locks/by-uid/acquire", {"Host: localhost"}, "{}");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(errorOf(r), "peer_not_allowed") << r.body;
  EXPECT_NE(r.body.find("uid " + me), std::string::npos) << r.body;
  HttpClient c = HttpClient::tcp(refused.port());
  EXPECT_EQ(json::parse(c.get("/v1/locks/by-uid").body)["held"], false) << "nothing changed";
  EXPECT_EQ(c.post("/v1/locks/by-tcp/acquire", "{}").status, 200) << "TCP has no uid list";
  EXPECT_EQ(refused.stop(), 0) << refused.logs();

  SidecarProcess allowed({"backend:\n  type: memory\n",
                          {},
                          false,
                          "  unix_allowed_uids: [" + other + ", " + me + "]\n"});
  HttpClient a = HttpClient::unix(allowed.socketPath());
  r = send(a, "POST", "/v1/locks/by-uid/acquire", {"Host: localhost"}, "{}");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(allowed.stop(), 0) << allowed.logs();
}

TEST(UnixSocketTest, ModeAndGroupAreApplied) {
  // Root may give the socket any group; others only one of their own.
  gid_t gid = getegid();
  if (geteuid() == 0) gid = gid + 4242;
  SidecarProcess sidecar(
      {"backend:\n  type: memory\n",
       {},
       false,
       "  unix_mode: \"0600\"\n  unix_group: \"" + std::to_string(gid) + "\"\n"});
  struct stat st {};
  ASSERT_EQ(::stat(sidecar.socketPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(HttpClient::unix(sidecar.socketPath()).get("/healthz").status, 200);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(UnixSocketTest, StaleFileIsReplacedLiveSocketAndOtherFilesAreLeftAlone) {
  SidecarProcess sidecar({"backend:\n  type: memory\n", {}, false});
  const std::string path = sidecar.socketPath();
  // A second sidecar on the same socket path must not take the live socket away.
  std::string out;
  const std::string yaml =
      "listen:\n  tcp: \"\"\n  unix: \"" + path + "\"\nbackend:\n  type: memory\n";
  EXPECT_EQ(runSidelock(sidecar.dir(), "--config", yaml, &out), 1) << out;
  EXPECT_NE(out.find("is in use"), std::string::npos) << out;
  EXPECT_EQ(HttpClient::unix(path).get("/healthz").status, 200) << "the live socket still works";

  // Killed -9, the sidecar leaves its socket file behind: nobody listens, so it is stale.
  sidecar.kill();
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0) << "SIGKILL leaves the file";
  sidecar.restart();
  EXPECT_EQ(HttpClient::unix(path).get("/healthz").status, 200);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();

  // A path that is not a socket is never removed.
  const std::string file = sidecar.dir() + "/not-a-socket";
  std::ofstream(file) << "data";
  EXPECT_EQ(runSidelock(
                sidecar.dir(), "--config",
                "listen:\n  tcp: \"\"\n  unix: \"" + file + "\"\nbackend:\n  type: memory\n", &out),
            1)
      << out;
  EXPECT_NE(out.find("exists and is not a socket"), std::string::npos) << out;
  EXPECT_EQ(::lstat(file.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(UnixSocketTest, AMissingSocketDirectoryIsNamedAtBindAndByCheckConfig) {
  const std::string dir = makeTempDir("sidelock-nodir");
  const std::string missing = dir + "/missing";
  const std::string yaml =
      "listen:\n  tcp: \"\"\n  unix: \"" + missing + "/s.sock\"\nbackend:\n  type: memory\n";
  const std::string named =
      "directory " + missing + " does not exist (create it, or set listen.unix";
  std::string out;
  EXPECT_EQ(runSidelock(dir, "--check-config", yaml, &out), 2) << out;
  EXPECT_NE(out.find(named), std::string::npos) << out;
  EXPECT_EQ(runSidelock(dir, "--config", yaml, &out), 1) << out;
  EXPECT_NE(out.find("cannot bind unix socket " + missing + "/s.sock: " + named), std::string::npos)
      << out;

  // A parent that is a file, not a directory.
  const std::string file = dir + "/file";
  std::ofstream(file) << "data";
  EXPECT_EQ(
      runSidelock(dir, "--check-config",
                  "listen:\n  unix: \"" + file + "/s.sock\"\nbackend:\n  type: memory\n", &out),
      2)
      << out;
  EXPECT_NE(out.find(file + " is not a directory"), std::string::npos) << out;

  // An existing directory passes.
  EXPECT_EQ(
      runSidelock(dir, "--check-config",
                  "listen:\n  unix: \"" + dir + "/s.sock\"\nbackend:\n  type: memory\n", &out),
      0)
      << out;
  removeTree(dir);
}

TEST(UnixSocketTest, PathOver107BytesIsAConfigError) {
  const std::string dir = makeTempDir("sidelock-longpath");
  const std::string long_path = "/tmp/" + std::string(103, 'x') + ".sock";  // 113 bytes
  std::string out;
  EXPECT_EQ(runSidelock(dir, "--check-config",
                        "listen:\n  unix: \"" + long_path + "\"\nbackend:\n  type: memory\n", &out),
            2)
      << out;
  EXPECT_NE(out.find("listen.unix: socket path longer than 107 bytes"), std::string::npos) << out;
  removeTree(dir);
}

}  // namespace
}  // namespace sidelock::testing
