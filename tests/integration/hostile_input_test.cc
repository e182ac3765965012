// Issue 11, "Hostile input": the real sidelock binary against a real redis-server, fed bodies,
// content types and lock names a careless or hostile local client might send. Each case must get
// a clean JSON error (status + code), leave the connection usable when the framing was fine, and
// change nothing: no key is ever written to Redis by a refused request.
#include <gtest/gtest.h>

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

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sidecar_ = std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: redis\n  nodes: [\"" + redis_.address() + "\"]\n", {}, true});
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

}  // namespace
}  // namespace sidelock::testing
