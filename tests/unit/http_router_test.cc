// Router: pure matching logic, no loop and no sockets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/percent_encoding.h"
#include "http/http_error.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

// Records what the router answered instead of writing to a socket.
class RecordingResponder final : public Responder {
 public:
  void send(int s, std::string_view ct, std::string b,
            std::vector<std::pair<std::string, std::string>> extra) override {
    status = s;
    content_type = std::string(ct);
    body = std::move(b);
    headers = std::move(extra);
  }
  void startStream(int, std::string_view) override {}
  bool writeChunk(std::string_view) override { return true; }
  void endStream() override {}
  bool clientConnected() const override { return true; }
  void onClientGone(std::function<void()>) override {}

  std::string header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "";
  }

  int status = 0;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* pattern :
         {"/v1/locks/{name}/acquire", "/v1/locks/{name}/release", "/v1/locks/{name}", "/v1/locks",
          "/healthz", "/readyz", "/metrics"}) {
      std::string method = std::string(pattern).find("acquire") != std::string::npos ||
                                   std::string(pattern).find("release") != std::string::npos
                               ? "POST"
                               : "GET";
      ASSERT_TRUE(router_.add(method, pattern, record(method + " " + pattern)).isOk());
    }
    ASSERT_TRUE(
        router_.add("DELETE", "/v1/locks/{name}", record("DELETE /v1/locks/{name}")).isOk());
  }

  Handler record(std::string label) {
    return [this, label](Request& req, ResponderPtr res) {
      called_ = label;
      res->send(200, "text/plain", std::string(req.route));
    };
  }

  std::pair<std::shared_ptr<RecordingResponder>, Request> run(std::string method,
                                                              std::string raw_path) {
    Request req;
    req.method = std::move(method);
    req.raw_path = std::move(raw_path);
    auto res = std::make_shared<RecordingResponder>();
    called_.clear();
    router_.dispatch(req, res);
    return {res, std::move(req)};
  }

  Router router_;
  std::string called_;
};

TEST_F(RouterTest, MatchesLiteralAndParameterRoutesAndFillsParams) {
  auto [res, req] = run("POST", "/v1/locks/orders-42/acquire");
  EXPECT_EQ(called_, "POST /v1/locks/{name}/acquire");
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(req.route, "/v1/locks/{name}/acquire");
  EXPECT_EQ(req.param("name"), "orders-42");

  auto [res2, req2] = run("GET", "/healthz");
  EXPECT_EQ(called_, "GET /healthz");
  EXPECT_EQ(req2.route, "/healthz");
  EXPECT_TRUE(req2.params.empty());

  auto [res3, req3] = run("GET", "/v1/locks/x");
  EXPECT_EQ(called_, "GET /v1/locks/{name}");
  EXPECT_EQ(req3.param("name"), "x");
}

TEST_F(RouterTest, PercentDecodesParameterSegmentsAfterSplitting) {
  auto [res, req] = run("POST", "/v1/locks/a%2Fb%20c/acquire");
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(req.param("name"), "a/b c");
  // '+' is not a space in a path.
  auto [res2, req2] = run("GET", "/v1/locks/a+b");
  EXPECT_EQ(req2.param("name"), "a+b");
  // Literal segments compare decoded.
  auto [res3, req3] = run("GET", "/%68ealthz");
  EXPECT_EQ(called_, "GET /healthz");
}

TEST_F(RouterTest, UnknownPathIs404WithJsonErrorAndUnmatchedRoute) {
  for (const char* path : {"/nope", "/v1/locks/x/acquire/more", "/v1", "/", "/v1/locks/",
                           "/v1/locks//acquire", "/healthz/"}) {
    auto [res, req] = run("GET", path);
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(req.route, "unmatched") << path;
    EXPECT_TRUE(called_.empty()) << path;
    auto body = nlohmann::json::parse(res->body);
    EXPECT_EQ(body["error"], "not_found");
    EXPECT_TRUE(body["message"].is_string());
    EXPECT_EQ(res->content_type, "application/json");
  }
}

TEST_F(RouterTest, WrongMethodIs405WithAllowHeaderListingEachMethodOnce) {
  auto [res, req] = run("GET", "/v1/locks/x/acquire");
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "POST");
  EXPECT_EQ(req.route, "/v1/locks/{name}/acquire");
  EXPECT_EQ(nlohmann::json::parse(res->body)["error"], "method_not_allowed");

  auto [res2, req2] = run("PUT", "/v1/locks/x");
  EXPECT_EQ(res2->status, 405);
  EXPECT_EQ(res2->header("Allow"), "GET, HEAD, DELETE");

  auto [res3, req3] = run("POST", "/metrics");
  EXPECT_EQ(res3->status, 405);
  EXPECT_EQ(res3->header("Allow"), "GET, HEAD");
  EXPECT_TRUE(called_.empty());
}

// Issue 11: HEAD works wherever GET does (it was 405), through the GET handler; POST-only
// routes still refuse it.
TEST_F(RouterTest, HeadIsServedByTheGetRoute) {
  for (const char* path : {"/healthz", "/metrics", "/v1/locks/x", "/v1/locks"}) {
    auto [res, req] = run("HEAD", path);
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(called_, "GET " + std::string(req.route)) << path;
  }
  auto [res, req] = run("HEAD", "/v1/locks/x/acquire");
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "POST");
  EXPECT_TRUE(called_.empty());
}

TEST_F(RouterTest, MalformedPercentEncodingIs400) {
  for (const char* path : {"/v1/locks/%zz", "/v1/locks/abc%", "/v1/locks/abc%4"}) {
    auto [res, req] = run("GET", path);
    EXPECT_EQ(res->status, 400) << path;
    EXPECT_EQ(nlohmann::json::parse(res->body)["error"], "bad_request");
    EXPECT_EQ(req.route, "unmatched");
  }
}

TEST_F(RouterTest, LiteralSegmentBeatsParameterRegardlessOfOrder) {
  ASSERT_TRUE(router_.add("GET", "/v1/locks/stats", record("stats")).isOk());
  auto [res, req] = run("GET", "/v1/locks/stats");
  EXPECT_EQ(called_, "stats");
  EXPECT_EQ(req.route, "/v1/locks/stats");
  auto [res2, req2] = run("GET", "/v1/locks/other");
  EXPECT_EQ(called_, "GET /v1/locks/{name}");
}

TEST_F(RouterTest, FallsBackToPathWhenRawPathIsEmpty) {
  Request req;
  req.method = "GET";
  req.path = "/readyz";
  auto res = std::make_shared<RecordingResponder>();
  router_.dispatch(req, res);
  EXPECT_EQ(called_, "GET /readyz");
}

TEST_F(RouterTest, AsHandlerDispatches) {
  Handler h = router_.asHandler();
  Request req;
  req.method = "GET";
  req.raw_path = "/metrics";
  auto res = std::make_shared<RecordingResponder>();
  h(req, res);
  EXPECT_EQ(called_, "GET /metrics");
  EXPECT_EQ(res->status, 200);
}

// A route is exclusive when no other route of its method can match one of its paths: then a
// gateway may dispatch to it without matching, and gets what matching would give.
TEST_F(RouterTest, ExclusiveRouteIsTheOneEveryPathOfItsPatternReaches) {
  std::optional<Router::Exclusive> acquire =
      router_.exclusiveRoute("POST", "/v1/locks/{name}/acquire");
  ASSERT_TRUE(acquire.has_value());
  EXPECT_EQ(acquire->route, "/v1/locks/{name}/acquire");
  EXPECT_EQ(acquire->params, std::vector<std::string_view>{"name"});
  // Dispatched without matching: the label comes from the gateway's pattern, set only now (a
  // request refused before routing keeps the unmatched label).
  Request req;
  req.method = "POST";
  req.raw_path = "/nothing/matches/this";  // not looked at: the request is routed already
  req.routed_handler = acquire->handler;
  req.routed_pattern = acquire->route;
  req.params.emplace_back("name", "a/b");
  EXPECT_EQ(req.route, "");
  auto res = std::make_shared<RecordingResponder>();
  router_.dispatch(req, res);
  EXPECT_EQ(called_, "POST /v1/locks/{name}/acquire");
  EXPECT_EQ(res->body, "/v1/locks/{name}/acquire");
  EXPECT_EQ(req.route, "/v1/locks/{name}/acquire");
  EXPECT_EQ(req.param("name"), "a/b");
  // The same as matching, for names the path must encode.
  for (const char* name : {"a/b", "%41", ".", "..", "\xc3\xa4 b", "stats"}) {
    Request routed;
    routed.routed_handler = acquire->handler;
    routed.routed_pattern = acquire->route;
    routed.params.emplace_back("name", name);
    router_.dispatch(routed, std::make_shared<RecordingResponder>());
    const std::string routed_call = called_;
    auto [matched_res, matched] =
        run("POST", "/v1/locks/" + percentEncode(name, PercentKeep::kUnreserved) + "/acquire");
    EXPECT_EQ(called_, routed_call) << name;
    EXPECT_EQ(matched.route, routed.route) << name;
    EXPECT_EQ(matched.params, routed.params) << name;
  }

  // The shape is what counts, with the route's own parameter names.
  std::optional<Router::Exclusive> same_shape =
      router_.exclusiveRoute("POST", "/v1/locks/{lock_name}/acquire");
  ASSERT_TRUE(same_shape.has_value());
  EXPECT_EQ(same_shape->handler, acquire->handler);
  EXPECT_EQ(same_shape->params, std::vector<std::string_view>{"name"});
  // Not registered for that method, or not at all, or not a pattern; never HEAD (it matches the
  // GET routes too).
  EXPECT_FALSE(router_.exclusiveRoute("GET", "/v1/locks/{name}/acquire"));
  EXPECT_FALSE(router_.exclusiveRoute("POST", "/v1/locks/{name}/take"));
  EXPECT_FALSE(router_.exclusiveRoute("POST", "v1/locks"));
  EXPECT_FALSE(router_.exclusiveRoute("HEAD", "/healthz"));
  // A route of another method on the same shape does not matter (the method picks the route).
  EXPECT_TRUE(router_.exclusiveRoute("GET", "/v1/locks/{name}"));
  EXPECT_TRUE(router_.exclusiveRoute("DELETE", "/v1/locks/{name}"));
  // Once it has answered, the table is fixed: its answers point into it.
  EXPECT_FALSE(router_.add("GET", "/v1/later", record("later")).isOk());
}

TEST(RouterExclusiveTest, AnOverlappingRouteOfTheSameMethodMakesNeitherExclusive) {
  auto handler = [](Request&, ResponderPtr) {};
  Router literal;
  ASSERT_TRUE(literal.add("GET", "/v1/locks/{name}", handler).isOk());
  ASSERT_TRUE(literal.add("GET", "/v1/locks/stats", handler).isOk());
  // "/v1/locks/stats" matches both.
  EXPECT_FALSE(literal.exclusiveRoute("GET", "/v1/locks/{name}"));
  EXPECT_FALSE(literal.exclusiveRoute("GET", "/v1/locks/stats"));

  Router param;
  ASSERT_TRUE(param.add("POST", "/v1/locks/{name}/acquire", handler).isOk());
  ASSERT_TRUE(param.add("POST", "/v1/locks/{name}/release", handler).isOk());
  ASSERT_TRUE(param.add("POST", "/v1/{kind}/{name}/acquire", handler).isOk());
  // A parameter where it has a literal overlaps; a different literal does not.
  EXPECT_FALSE(param.exclusiveRoute("POST", "/v1/locks/{name}/acquire"));
  EXPECT_TRUE(param.exclusiveRoute("POST", "/v1/locks/{name}/release"));
}

TEST(RouterAddTest, RejectsBadPatternsAndDuplicates) {
  Router r;
  Handler h = [](Request&, ResponderPtr) {};
  EXPECT_FALSE(r.add("GET", "no-slash", h).isOk());
  EXPECT_FALSE(r.add("GET", "", h).isOk());
  EXPECT_FALSE(r.add("", "/x", h).isOk());
  EXPECT_FALSE(r.add("GET", "/a/{}", h).isOk());
  EXPECT_FALSE(r.add("GET", "/a/{x", h).isOk());
  EXPECT_FALSE(r.add("GET", "/a/x{y}", h).isOk());
  EXPECT_FALSE(r.add("GET", "/a/{bad-name}", h).isOk());
  EXPECT_FALSE(r.add("GET", "/{x}/{x}", h).isOk());
  EXPECT_TRUE(r.add("GET", "/a/{x}", h).isOk());
  Status dup = r.add("GET", "/a/{x}", h);
  EXPECT_FALSE(dup.isOk());
  EXPECT_NE(dup.message().find("twice"), std::string::npos);
  EXPECT_TRUE(r.add("POST", "/a/{x}", h).isOk());
  EXPECT_EQ(r.size(), 2u);
}

TEST(PercentDecodeTest, DecodesAndRejects) {
  std::string out;
  EXPECT_TRUE(percentDecode("a%41%62c", &out));
  EXPECT_EQ(out, "aAbc");
  EXPECT_TRUE(percentDecode("%00", &out));
  EXPECT_EQ(out, std::string(1, '\0'));
  EXPECT_TRUE(percentDecode("", &out));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(percentDecode("%", &out));
  EXPECT_FALSE(percentDecode("%g0", &out));
  EXPECT_FALSE(percentDecode("ab%1", &out));
}

TEST(ErrorBodyTest, IsJsonWithCodeAndMessageEvenForInvalidUtf8) {
  auto j = nlohmann::json::parse(errorBody("bad_request", "path \xff\xfe here"));
  EXPECT_EQ(j["error"], "bad_request");
  EXPECT_TRUE(j["message"].is_string());
  EXPECT_EQ(reasonPhrase(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace sidelock::http
