// Issue 11, "Hostile input": the real sidelock binary against a real redis-server, fed bodies,
// content types and lock names a careless or hostile local client might send. Each case must get
// a clean JSON error (status + code), leave the connection usable when the framing was fine, and
// change nothing: no key is ever written to Redis by a refused request.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using namespace std::string_literals;

/// Everything the server sends on `fd` until it closes the connection or `timeout_ms` passes
/// (`closed` tells which). Raw bytes: a HEAD answer has a Content-Length but no body.
std::string readUntilClose(int fd, bool* closed, int timeout_ms = 5000) {
  std::string data;
  *closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    timeval tv{0, 50'000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      *closed = true;
      break;
    }
    if (n > 0) data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A short header timeout, so the test of a body that never arrives is quick.
    sidecar_ = std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: redis\n  nodes: [\"" + redis_.address() + "\"]\n",
        {},
        true,
        "  header_timeout_ms: 1000\n"});
  }
  void TearDown() override { EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs(); }

  HttpClient client() { return HttpClient::tcp(sidecar_->port()); }

  /// A POST with exactly these Content-Type (none if empty) and body bytes, on `c`.
  static HttpResponse rawPost(HttpClient& c, const std::string& path,
                              const std::string& content_type, const std::string& body) {
    std::string req = "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n";
    if (!content_type.empty()) req += "Content-Type: " + content_type + "\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    c.sendRaw(req);
    auto r = c.readResponse();
    EXPECT_TRUE(r.has_value()) << "no answer to " << path;
    return r.value_or(HttpResponse{});
  }

  /// The answer is `status` with a JSON error `code` and a message; returns the message.
  static std::string expectError(const HttpResponse& r, int status, const std::string& code,
                                 const std::string& what) {
    EXPECT_EQ(r.status, status) << what << " -> " << r.body;
    EXPECT_EQ(r.headers.count("content-type") ? r.headers.at("content-type") : "",
              "application/json")
        << what;
    json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      ADD_FAILURE() << what << ": not a JSON object: " << r.body;
      return "";
    }
    EXPECT_EQ(j.value("error", ""), code) << what << " -> " << r.body;
    EXPECT_TRUE(j["message"].is_string()) << what;
    return j.value("message", "");
  }

  std::string dbsize() { return redis_.cli({"DBSIZE"}); }

  RedisServer redis_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(HostileInputTest, BadJsonBodiesAreRefusedAndTakeNothing) {
  struct Case {
    std::string body;
    std::string message_part;  // the answer's message names the problem
  };
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"{\"ttl_ms\":1000", "not valid JSON"},
      {"{\"ttl_ms\":1000} garbage", "trailing data"},
      {"{\"ttl_ms\":1000}{}", "trailing data"},
      {"{\"ttl_ms\":1000}\0garbage"s, "NUL byte"},
      {"{\"ttl_ms\":1000}\0"s, "NUL byte"},
      {R"({"ttl_ms":1000,"ttl_ms":2000})", "\"ttl_ms\" is given twice"},
      {R"({"owner":"a","owner":"b"})", "\"owner\" is given twice"},
      {"{\"owner\":\"\xff\xfe\"}", "invalid UTF-8"},
      {"{\"own\xc3\":1}", "invalid UTF-8"},
      {R"({"ttl_ms":"1000"})", "ttl_ms must be an integer"},
      {R"({"ttl_ms":true})", "ttl_ms must be an integer"},
      {R"({"auto_renew":1})", "auto_renew must be true or false"},
      {R"({"owner":7})", "owner must be a string"},
      {R"({"hold":["stream"]})", "hold must be a string"},
      {"[]", "must be a JSON object"},
      {"\"x\"", "must be a JSON object"},
      {deep, "nests deeper than"},
      {R"({"ttl_ms":)" + deep + "}", "nests deeper than"},
      {R"({"ttl_ms":99999999999999999999999999})", "ttl_ms must be between"},
      {R"({"wait_ms":-99999999999999999999999999})", "wait_ms must be between"},
      {R"({"ttl_ms":1e999})", "ttl_ms is out of range"},
  };
  HttpClient c = client();
  for (const Case& tc : cases) {
    HttpResponse r = rawPost(c, "/v1/locks/x/acquire", "application/json", tc.body);
    const std::string message = expectError(r, 400, "bad_request", tc.body);
    EXPECT_NE(message.find(tc.message_part), std::string::npos) << tc.body << " -> " << message;
    EXPECT_TRUE(r.keep_alive) << "the framing was fine: the connection stays usable";
  }
  EXPECT_EQ(dbsize(), "0") << "a refused body took a lock";
  // The same connection still works, and the lock was never taken.
  EXPECT_EQ(rawPost(c, "/v1/locks/x/acquire", "application/json", R"({"ttl_ms":1000})").status,
            200);
}

TEST_F(HostileInputTest, ContentTypeIsParsedAsAMediaType) {
  HttpClient c = client();
  int granted = 0;
  for (const char* type :
       {"Application/JSON; charset=UTF-8", "application/json;charset=utf-8", "APPLICATION/JSON",
        "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", ""}) {
    const std::string name = "ct-" + std::to_string(granted);
    HttpResponse r = rawPost(c, "/v1/locks/" + name + "/acquire", type, R"({"ttl_ms":5000})");
    EXPECT_EQ(r.status, 200) << "Content-Type \"" << type << "\" -> " << r.body;
    granted += r.status == 200;
  }
  for (const char* type : {"application/jsonx", "application/json-seq", "text/plainx",
                           "application/json; charset=latin1", "application/json garbage",
                           "text/html", "multipart/form-data; boundary=x", "json"}) {
    HttpResponse r = rawPost(c, "/v1/locks/refused/acquire", type, R"({"ttl_ms":5000})");
    expectError(r, 415, "unsupported_media_type", type);
  }
  EXPECT_EQ(granted, 7);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{refused}"}), "0") << "a refused type took a lock";
  EXPECT_EQ(json::parse(c.get("/v1/locks/refused").body)["held"], false);
}

TEST_F(HostileInputTest, BadLockNamesAreRefusedAndTakeNothing) {
  struct Case {
    std::string path;  // raw request target
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"/v1/locks/./acquire", 400, "invalid_name"},
      {"/v1/locks/../acquire", 400, "invalid_name"},
      {"/v1/locks/%2E/acquire", 400, "invalid_name"},
      {"/v1/locks/%2e%2E/acquire", 400, "invalid_name"},
      {"/v1/locks//acquire", 404, "not_found"},  // empty: no route has an empty segment
      {"/v1/locks/" + std::string(201, 'n') + "/acquire", 400, "invalid_name"},
      {"/v1/locks/a%00b/acquire", 400, "invalid_name"},
      {"/v1/locks/a%0D%0Ab/acquire", 400, "invalid_name"},
      {"/v1/locks/a%7Fb/acquire", 400, "invalid_name"},
      {"/v1/locks/a%2Fb/acquire", 400, "invalid_name"},
      {"/v1/locks/a%2fb/acquire", 400, "invalid_name"},
      {"/v1/locks/a/b/acquire", 404, "not_found"},
      {"/v1/locks/%252E%252E/acquire", 400, "invalid_name"},  // decoded once: "%2E%2E"
      {"/v1/locks/a%20b/acquire", 400, "invalid_name"},
      {"/v1/locks/a*/acquire", 400, "invalid_name"},
      {"/v1/locks/a%3F/acquire", 400, "invalid_name"},
      {"/v1/locks/%5Ba-z%5D/acquire", 400, "invalid_name"},
      {"/v1/locks/%7Btag%7D/acquire", 400, "invalid_name"},
      {"/v1/locks/caf%C3%A9/acquire", 400, "invalid_name"},
      {"/v1/locks/a%/acquire", 400, "bad_request"},
      {"/v1/locks/a%zz/acquire", 400, "bad_request"},
  };
  for (const Case& tc : cases) {
    HttpClient c = client();
    HttpResponse r = rawPost(c, tc.path, "application/json", "{}");
    expectError(r, tc.status, tc.code, tc.path);
    if (tc.code == "bad_request") {
      // Malformed percent-encoding is refused with the request line: the connection ends.
      EXPECT_FALSE(r.keep_alive) << tc.path;
      EXPECT_TRUE(c.waitForClose()) << tc.path;
      continue;
    }
    EXPECT_TRUE(r.keep_alive) << tc.path;
    // The same names through the other routes are refused alike.
    if (tc.code == "invalid_name") {
      std::string base = tc.path.substr(0, tc.path.size() - std::string("/acquire").size());
      expectError(c.get(base), 400, "invalid_name", "GET " + base);
      expectError(rawPost(c, base + "/release", "application/json", R"({"owner":"o"})"), 400,
                  "invalid_name", base + "/release");
    }
  }
  HttpClient c = client();
  const std::string message =
      expectError(rawPost(c, "/v1/locks/a%2Fb/acquire", "", ""), 400, "invalid_name", "%2F");
  EXPECT_NE(message.find("'/'"), std::string::npos) << message;
  EXPECT_EQ(dbsize(), "0") << "a refused name took a lock";
}

TEST_F(HostileInputTest, PercentEncodedNameIsTheSameLock) {
  HttpClient c = client();
  HttpResponse r = rawPost(c, "/v1/locks/%41bc/acquire", "application/json", R"({"ttl_ms":5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["name"], "Abc");
  r = rawPost(c, "/v1/locks/Abc/acquire", "application/json", "{}");
  EXPECT_EQ(r.status, 409) << "%41bc and Abc are one lock";
  r = rawPost(c, "/v1/locks/%41%62%63/acquire", "application/json", "{}");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(json::parse(c.get("/v1/locks/A%62c").body)["held"], true);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{Abc}"}), "1");
  EXPECT_EQ(redis_.cli({"KEYS", "sidelock:{%*"}), "") << "no key under the encoded name";
  // Names are case-sensitive: %61 is 'a', another lock.
  EXPECT_EQ(rawPost(c, "/v1/locks/%61bc/acquire", "application/json", "{}").status, 200);
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{abc}"}), "1");
}

// Framing attacks, each on its own connection: a clean JSON error with its status and code,
// Connection: close and the connection closed (the framing of anything after them is unknown),
// and no lock taken. A probe on a fresh connection still works after all of them.
TEST_F(HostileInputTest, HostileFramingGetsCleanErrorsClosesAndTakesNothing) {
  struct Case {
    std::string what;
    std::string bytes;
    int status;
    std::string code;
  };
  const std::string kAcquire = "POST /v1/locks/framed/acquire HTTP/1.1\r\nHost: localhost\r\n";
  std::string chunks;
  for (int i = 0; i < 3; ++i) chunks += "8000\r\n" + std::string(0x8000, ' ') + "\r\n";
  std::string many_headers = kAcquire;
  for (int i = 0; i < 150; ++i) many_headers += "X-" + std::to_string(i) + ": v\r\n";
  const std::vector<Case> cases = {
      {"garbage request line", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 garbage\r\n\r\n", 400,
       "bad_request"},
      {"raw control byte in the target",
       "POST /v1/locks/a\x01b/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400,
       "bad_request"},
      {"raw space in the target",
       "POST /v1/locks/a b/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400,
       "bad_request"},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "http_version_not_supported"},
      {"Content-Length with Transfer-Encoding",
       kAcquire + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
       400, "bad_request"},
      {"duplicate Content-Length", kAcquire + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
       400, "bad_request"},
      {"Content-Length list", kAcquire + "Content-Length: 2,2\r\n\r\n{}", 400, "bad_request"},
      {"overflowing Content-Length", kAcquire + "Content-Length: 184467440737095516160\r\n\r\n{}",
       400, "bad_request"},
      {"bad chunk size", kAcquire + "Transfer-Encoding: chunked\r\n\r\n2x\r\n{}\r\n0\r\n\r\n", 400,
       "bad_request"},
      {"overflowing chunk size",
       kAcquire + "Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n{}\r\n0\r\n\r\n", 400,
       "bad_request"},
      {"NUL in a header", kAcquire + "X-A: a\0b\r\nContent-Length: 2\r\n\r\n{}"s, 400,
       "bad_request"},
      {"CR in a header", kAcquire + "X-A: a\rb\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_request"},
      {"LF in a header", kAcquire + "X-A: a\nb\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_request"},
      {"whitespace before a colon", kAcquire + "Content-Length : 2\r\n\r\n{}", 400, "bad_request"},
      {"URI too long",
       "POST /v1/locks/" + std::string(9000, 'a') + "/acquire HTTP/1.1\r\nHost: x\r\n\r\n", 414,
       "uri_too_long"},
      {"headers too large",
       kAcquire + "X-Big: " + std::string(20'000, 'b') + "\r\nContent-Length: 2\r\n\r\n{}", 431,
       "headers_too_large"},
      {"too many headers", many_headers + "Content-Length: 2\r\n\r\n{}", 431, "headers_too_large"},
      {"body too large", kAcquire + "Content-Length: 70000\r\n\r\n{}", 413, "payload_too_large"},
      {"chunked body too large in total",
       kAcquire + "Transfer-Encoding: chunked\r\n\r\n" + chunks + "0\r\n\r\n", 413,
       "payload_too_large"},
      {"HTTP/1.1 without Host",
       "POST /v1/locks/framed/acquire HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_request"},
      {"two Content-Types",
       kAcquire + "Content-Type: text/xml\r\nContent-Type: application/json\r\n"
                  "Content-Length: 2\r\n\r\n{}",
       400, "bad_request"},
      {"two Hosts", kAcquire + "Host: other\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_request"},
      {"gzip, chunked", kAcquire + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
       501, "not_implemented"},
      {"gzip alone", kAcquire + "Transfer-Encoding: gzip\r\n\r\n{}", 400, "bad_request"},
      {"chunked in HTTP/1.0",
       "POST /v1/locks/framed/acquire HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
       "2\r\n{}\r\n0\r\n\r\n",
       400, "bad_request"},
      {"HTTP/0.9 request line", "GET /v1/locks/framed\r\n\r\n", 400, "bad_request"},
      {"HTTP/0.9 request line, nothing after", "GET /healthz\r\n", 400, "bad_request"},
  };
  for (const Case& tc : cases) {
    HttpClient c = client();
    c.sendRaw(tc.bytes);
    bool closed = false;
    const std::string raw = readUntilClose(c.fd(), &closed);
    EXPECT_TRUE(closed) << tc.what << ": the connection stays open";
    const size_t head_end = raw.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << tc.what << ": " << raw;
    const std::string head = raw.substr(0, head_end + 2);
    EXPECT_EQ(head.rfind("HTTP/1.1 " + std::to_string(tc.status) + " ", 0), 0u)
        << tc.what << ": " << head;
    EXPECT_NE(head.find("Connection: close\r\n"), std::string::npos) << tc.what;
    EXPECT_NE(head.find("Content-Type: application/json\r\n"), std::string::npos) << tc.what;
    EXPECT_EQ(head.find("100 Continue"), std::string::npos) << tc.what;
    json j = json::parse(raw.substr(head_end + 4), nullptr, false);
    ASSERT_TRUE(j.is_object()) << tc.what << ": " << raw;
    EXPECT_EQ(j.value("error", ""), tc.code) << tc.what << ": " << raw;
    EXPECT_TRUE(j["message"].is_string()) << tc.what;
  }
  EXPECT_EQ(dbsize(), "0") << "a refused request took a lock";
  EXPECT_EQ(client().get("/healthz").status, 200);
}

// Expect: 100-continue with a body over the limit: 413 at once, without the interim 100 (the
// client must not send the body) and without waiting for the body.
TEST_F(HostileInputTest, ExpectContinueWithAnOversizedBodyGets413WithoutReadingIt) {
  HttpClient c = client();
  c.sendRaw(
      "POST /v1/locks/big/acquire HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
      "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n");
  bool closed = false;
  const std::string raw = readUntilClose(c.fd(), &closed);
  EXPECT_EQ(raw.rfind("HTTP/1.1 413 ", 0), 0u) << raw;
  EXPECT_EQ(raw.find("100 Continue"), std::string::npos) << raw;
  EXPECT_NE(raw.find("\"error\":\"payload_too_large\""), std::string::npos) << raw;
  EXPECT_TRUE(closed);
  EXPECT_EQ(dbsize(), "0");
}

// A body shorter than its Content-Length: the client hanging up ends the connection, and one
// that stays silent gets 408 after the header timeout; the request is never run.
TEST_F(HostileInputTest, BodyShorterThanContentLengthIsNeverRun) {
  const std::string partial =
      "POST /v1/locks/short/acquire HTTP/1.1\r\nHost: localhost\r\n"
      "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{\"ttl_ms\":5000}";
  {
    HttpClient c = client();
    c.sendRaw(partial);
    ::shutdown(c.fd(), SHUT_WR);
    bool closed = false;
    const std::string raw = readUntilClose(c.fd(), &closed);
    EXPECT_TRUE(closed);
    EXPECT_EQ(raw, "") << "nobody is left to read an answer";
  }
  {
    HttpClient c = client();
    c.sendRaw(partial);
    bool closed = false;
    const std::string raw = readUntilClose(c.fd(), &closed, 10'000);
    EXPECT_EQ(raw.rfind("HTTP/1.1 408 ", 0), 0u) << raw;
    EXPECT_NE(raw.find("\"error\":\"request_timeout\""), std::string::npos) << raw;
    EXPECT_TRUE(closed);
  }
  EXPECT_EQ(dbsize(), "0");
  EXPECT_EQ(json::parse(client().get("/v1/locks/short").body)["held"], false);
}

// HEAD works wherever GET does: the GET answer's status and headers (Content-Length included),
// no body, and the connection stays in step for the next request. POST-only routes answer 405.
TEST_F(HostileInputTest, HeadIsAnsweredLikeGetWithoutABody) {
  HttpClient setup = client();
  ASSERT_EQ(rawPost(setup, "/v1/locks/seen/acquire", "application/json", "{}").status, 200);
  for (const std::string path :
       {"/healthz", "/readyz", "/metrics", "/v1/locks", "/v1/locks/seen", "/v1/locks/unseen"}) {
    HttpResponse get = client().get(path);
    ASSERT_EQ(get.status, 200) << path;
    HttpClient c = client();
    c.sendRaw("HEAD " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\r\n" +
              "Host: localhost\r\nConnection: close\r\n\r\n");
    bool closed = false;
    const std::string raw = readUntilClose(c.fd(), &closed);
    const size_t head_end = raw.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << path << ": " << raw;
    EXPECT_EQ(raw.rfind("HTTP/1.1 200 ", 0), 0u) << path << ": " << raw;
    // /metrics changes between two requests; its length may too. So may a listing's, when a
    // lease of an earlier test expires or its ttl_ms loses a digit between the GET and the HEAD:
    // the HEAD's length is the GET's before it or the one after it.
    if (path != "/metrics") {
      const std::string head = raw.substr(0, head_end + 2);
      const size_t after = client().get(path).body.size();
      const bool same_length =
          head.find("Content-Length: " + std::to_string(get.body.size()) + "\r\n") !=
              std::string::npos ||
          head.find("Content-Length: " + std::to_string(after) + "\r\n") != std::string::npos;
      EXPECT_TRUE(same_length) << path << ": GET lengths " << get.body.size() << ", " << after
                               << "; HEAD: " << raw;
    }
    EXPECT_EQ(raw.compare(head_end + 4, 13, "HTTP/1.1 200 "), 0)
        << path << ": the HEAD answer carried a body: " << raw;
    EXPECT_TRUE(closed);
  }
  HttpClient c = client();
  c.sendRaw("HEAD /v1/locks/framed/acquire HTTP/1.1\r\nHost: localhost\r\n\r\n");
  bool closed = false;
  const std::string raw = readUntilClose(c.fd(), &closed, 1000);
  EXPECT_EQ(raw.rfind("HTTP/1.1 405 ", 0), 0u) << raw;
  EXPECT_NE(raw.find("Allow: POST\r\n"), std::string::npos) << raw;
  EXPECT_EQ(raw.substr(raw.find("\r\n\r\n") + 4), "") << "no body for HEAD";
  EXPECT_EQ(redis_.cli({"EXISTS", "sidelock:{framed}"}), "0");
}

}  // namespace
}  // namespace sidelock::testing
