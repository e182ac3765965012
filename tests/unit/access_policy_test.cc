// Access control without sockets: token files, the constant-time verifier, the Origin / Host /
// token / peer-uid checks of a listener policy, and the API's lock-name scopes.
#include "http/access_policy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "api/lock_api.h"
#include "config/config.h"
#include "config/tokens.h"

namespace sidelock::http {
namespace {

constexpr const char* kTokenA = "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAA";
constexpr const char* kTokenB = "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBB";

Request request(std::vector<std::pair<std::string, std::string>> headers,
                std::string path = "/v1/locks/a/acquire") {
  Request r;
  r.method = "POST";
  r.path = std::move(path);
  r.headers = std::move(headers);
  return r;
}

TEST(TokenFileTest, ParsesTokensPrefixesAndComments) {
  auto t = config::parseTokens(std::string("# ops tokens\n\n") + kTokenA + "\n" + kTokenB +
                                   "  prefixes=orders-,invoices:,dapr~\r\n",
                               "auth.tokens_file");
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].secret, kTokenA);
  EXPECT_TRUE((*t)[0].prefixes.empty());
  EXPECT_EQ((*t)[0].label, "auth.tokens_file line 3");
  // ('~': a lock name's spelling of a Dapr resourceId's '/')
  EXPECT_EQ((*t)[1].prefixes, (std::vector<std::string>{"orders-", "invoices:", "dapr~"}));
}

TEST(TokenFileTest, ErrorsNameTheLineButNeverTheToken) {
  struct Case {
    std::string text;
    std::string expect;
  } cases[] = {
      {"short\n", "line 1: a token must be 16..4096"},
      {std::string("# c\n") + kTokenA + " " + kTokenB + "\n", "line 2: expected the token alone"},
      {std::string(kTokenA) + " prefixes=a-,,b\n", "line 1: prefixes must be non-empty"},
      {std::string(kTokenA) + " prefixes=a/b\n", "line 1: prefixes must be non-empty"},
      {std::string(kTokenA) + "\n" + kTokenA + "\n", "line 2: the same token appears twice"},
      {"tokenAAAAAAAAAAAA\"AAAAAA\n", "line 1: a token must be base64"},
  };
  for (const auto& c : cases) {
    auto t = config::parseTokens(c.text, "auth.tokens_file");
    ASSERT_FALSE(t.isOk()) << c.text;
    EXPECT_NE(t.status().message().find("auth.tokens_file " + c.expect), std::string::npos)
        << t.status().message();
    EXPECT_EQ(t.status().message().find("tokenA"), std::string::npos) << "never log a token";
  }
}

TEST(TokenFileTest, LoadsFileAndEnvAndRefusesAnEmptySet) {
  const std::string path = ::testing::TempDir() + "/sidelock_tokens_test";
  std::ofstream(path) << kTokenA << "\n";
  setenv("SIDELOCK_TEST_TOKENS", kTokenB, 1);
  auto both = config::loadTokens({path, "SIDELOCK_TEST_TOKENS", "auth.tokens"});
  ASSERT_TRUE(both.isOk()) << both.status().toString();
  EXPECT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[1].label, "auth.tokens_env (SIDELOCK_TEST_TOKENS) line 1");

  std::ofstream(path) << "# nothing yet\n";
  auto empty = config::loadTokens({path, "", "auth.tokens"});
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("auth.tokens_file: no token"), std::string::npos);
  auto unset = config::loadTokens({"", "SIDELOCK_TEST_UNSET_TOKENS", "auth.admin_tokens"});
  ASSERT_FALSE(unset.isOk());
  EXPECT_NE(unset.status().message().find("auth.admin_tokens_env"), std::string::npos);
  EXPECT_TRUE(config::loadTokens({"", "", "auth.tokens"}).isOk()) << "nothing configured is fine";
  unsetenv("SIDELOCK_TEST_TOKENS");
  ::unlink(path.c_str());
}

TEST(TokenVerifierTest, FindsThePrincipalOfEachTokenAndNothingElse) {
  auto entries = config::parseTokens(std::string(kTokenA) + "\n" + kTokenB + " prefixes=x-\n", "f");
  ASSERT_TRUE(entries.isOk());
  TokenVerifier v(*entries);
  ASSERT_EQ(v.size(), 2u);
  auto a = v.verify(kTokenA);
  ASSERT_TRUE(a);
  EXPECT_TRUE(a->scopes.empty());
  auto b = v.verify(kTokenB);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->scopes, std::vector<std::string>{"x-"});
  EXPECT_EQ(b->label, "f line 2");
  EXPECT_FALSE(v.verify(std::string(kTokenA).substr(0, 20)));
  EXPECT_FALSE(v.verify(std::string(kTokenA) + "A"));
  EXPECT_FALSE(v.verify(""));
  v.replace({});  // a reload to an empty set (never configured so, but must hold)
  EXPECT_FALSE(v.verify(kTokenA));
  EXPECT_EQ(a->label, "f line 1") << "a request's principal outlives a reload";
}

TEST(AccessPolicyTest, HostNames) {
  EXPECT_EQ(hostWithoutPort("LocalHost:7411"), "localhost");
  EXPECT_EQ(hostWithoutPort("[::1]:7411"), "[::1]");
  EXPECT_EQ(hostWithoutPort("[::1]"), "[::1]");
  EXPECT_EQ(hostWithoutPort("127.0.0.1"), "127.0.0.1");
  for (const char* ok : {"localhost", "127.0.0.1", "127.255.0.9", "127.000.0.01", "[::1]"}) {
    EXPECT_TRUE(isLoopbackHost(ok)) << ok;
  }
  for (const char* bad :
       {"", "evil.example", "localhost.evil.example", "127.0.0.1.evil.example", "128.0.0.1",
        "127.0.0", "127.0.0.256", "0x7f.0.0.1", "[::2]", "127.0.0.1x", "10.0.0.1", "127.0.0.1.",
        "127..0.1", "0127.0.0.1", "127.0.0.1000", "127.0.0.1.1", ".127.0.0.1"}) {
    EXPECT_FALSE(isLoopbackHost(bad)) << bad;
  }
}

TEST(AccessPolicyTest, HostFieldsAreHostAndAnOptionalPort) {
  for (const char* ok : {"", "localhost", "localhost:", "localhost:7411", "127.0.0.1:80", "[::1]",
                         "[::1]:65535", "app.svc.cluster.local:8080", "h", "xn--bcher-kva",
                         "[fe80::1%25eth0]:80", "[v1.x]", "LOCALHOST.:80"}) {
    EXPECT_TRUE(isValidHostField(ok)) << ok;
  }
  // (A bracketed name such as "[evil.example]" passes this syntax check; the Host check then
  // refuses it as no loopback name.)
  for (const char* bad :
       {"localhost:abc", "localhost:123456", "localhost:1:2", "a@localhost", "[::1", "[::1]x",
        "[::1]:x", "[]", "[::1]]", "local host", "h/p", "localhost:-1", "localhost: 80"}) {
    EXPECT_FALSE(isValidHostField(bad)) << bad;
  }
}

TEST(AccessPolicyTest, CurlDefaultsPass) {
  ListenerPolicy p;
  for (const char* host : {"localhost:7411", "127.0.0.1:7411", "[::1]:7411", "localhost"}) {
    Request r = request({{"host", host},
                         {"user-agent", "curl/7.88.1"},
                         {"content-type", "application/x-www-form-urlencoded"}});
    EXPECT_FALSE(checkAccess(r, p)) << host;
  }
  Request no_host = request({});
  EXPECT_FALSE(checkAccess(no_host, p)) << "HTTP/1.0 without Host is not ours to judge";
}

// The Host check remembers its last answer (one Host per client, usually): the same Host again,
// then another, then back, each judged as on its own.
TEST(AccessPolicyTest, HostChecksInTurnAnswerAsAlone) {
  ListenerPolicy p;
  p.allowed_hosts = {"app.internal"};
  const std::vector<std::pair<const char*, bool>> turns = {
      {"127.0.0.1:7411", true},  {"127.0.0.1:7411", true},   {"evil.example", false},
      {"evil.example", false},   {"127.0.0.1:7411", true},   {"app.internal:80", true},
      {"evil.example:7411", false}, {"LOCALHOST", true},     {"127.0.0.1.evil.example", false},
      {"[::1]:1", true},         {"app.internal", true},     {"127.0.0.2", true}};
  for (const auto& [host, allowed] : turns) {
    Request r = request({{"host", host}});
    auto refusal = checkAccess(r, p);
    EXPECT_EQ(!refusal, allowed) << host;
    if (refusal) {
      EXPECT_EQ(refusal->status, 421) << host;
    }
  }
}

TEST(AccessPolicyTest, OriginMustBeAllowed) {
  ListenerPolicy p;
  p.allowed_origins = {"http://localhost:3000"};
  for (const char* origin :
       {"http://evil.example", "null", "http://localhost:3001", "https://localhost:3000"}) {
    Request r = request({{"host", "localhost:7411"}, {"origin", origin}});
    auto refusal = checkAccess(r, p);
    ASSERT_TRUE(refusal) << origin;
    EXPECT_EQ(refusal->status, 403);
    EXPECT_EQ(refusal->code, kOriginNotAllowed);
  }
  Request ok = request({{"host", "localhost:7411"}, {"origin", "HTTP://LOCALHOST:3000"}});
  EXPECT_FALSE(checkAccess(ok, p));
  Request two = request(
      {{"host", "localhost"}, {"origin", "http://localhost:3000"}, {"origin", "http://evil"}});
  EXPECT_TRUE(checkAccess(two, p)) << "every Origin header must be allowed";
}

TEST(AccessPolicyTest, HostMustBeLoopbackOrConfigured) {
  ListenerPolicy p;
  p.allowed_hosts = {"sidelock"};
  Request rebound = request({{"host", "attacker.example:7411"}});
  auto refusal = checkAccess(rebound, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 421);
  EXPECT_EQ(refusal->code, kHostNotAllowed);
  Request named = request({{"host", "SideLock:7411"}});
  EXPECT_FALSE(checkAccess(named, p));
  p.allowed_hosts = {"*"};  // a listener reached by address from other hosts
  EXPECT_FALSE(checkAccess(rebound, p));
  p.allowed_hosts = {};
  p.browser_checks = false;  // the admin listener
  EXPECT_FALSE(checkAccess(rebound, p));
}

TEST(AccessPolicyTest, TokensOnTheListener) {
  auto entries = config::parseTokens(std::string(kTokenA) + " prefixes=orders-\n", "f");
  ASSERT_TRUE(entries.isOk());
  TokenVerifier tokens(*entries);
  ListenerPolicy p;
  p.tokens = &tokens;

  Request none = request({{"host", "localhost"}});
  auto refusal = checkAccess(none, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 401);
  EXPECT_EQ(refusal->code, kTokenRequired);
  ASSERT_EQ(refusal->headers.size(), 1u);
  EXPECT_EQ(refusal->headers[0].first, "WWW-Authenticate");
  EXPECT_EQ(refusal->headers[0].second.rfind("Bearer", 0), 0u);

  Request wrong =
      request({{"host", "localhost"}, {"authorization", "Bearer wrongwrongwrongwrong"}});
  refusal = checkAccess(wrong, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, kInvalidToken);
  EXPECT_NE(refusal->headers[0].second.find("invalid_token"), std::string::npos);

  Request basic =
      request({{"host", "localhost"}, {"authorization", std::string("Basic ") + kTokenA}});
  refusal = checkAccess(basic, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, kTokenRequired);

  Request good =
      request({{"host", "localhost"}, {"authorization", std::string("bearer  ") + kTokenA}});
  EXPECT_FALSE(checkAccess(good, p));
  ASSERT_TRUE(good.principal);
  EXPECT_EQ(good.principal->scopes, std::vector<std::string>{"orders-"});

  Request probe = request({{"host", "localhost"}}, "/healthz");
  EXPECT_FALSE(checkAccess(probe, p)) << "probes need no token";
  Request metrics = request({{"host", "localhost"}}, "/metrics");
  EXPECT_TRUE(checkAccess(metrics, p));
  Request not_listed = request({{"host", "localhost"}}, "/v1/elections/scheduler/ready");
  EXPECT_TRUE(checkAccess(not_listed, p)) << "only listed paths are token-free";
  p.token_free_paths.push_back("/v1/elections/{name}/ready");
  Request listed = request({{"host", "localhost"}}, "/v1/elections/scheduler/ready");
  EXPECT_FALSE(checkAccess(listed, p)) << "the leader-only readiness probe sends no token";
  Request campaign = request({{"host", "localhost"}}, "/v1/elections/scheduler/campaign");
  EXPECT_TRUE(checkAccess(campaign, p));
  // The path as sent decides, as for the router: an encoded "/" stays inside the election's name.
  Request encoded = request({{"host", "localhost"}}, "/v1/elections/a/b/ready");
  encoded.raw_path = "/v1/elections/a%2Fb/ready";
  EXPECT_FALSE(checkAccess(encoded, p)) << "the router sends it to the readiness route";

  p.token_required = false;  // the Unix socket without auth.unix_requires_token
  Request anonymous = request({{"host", "localhost"}});
  EXPECT_FALSE(checkAccess(anonymous, p));
  EXPECT_FALSE(anonymous.principal);
  Request scoped =
      request({{"host", "localhost"}, {"authorization", std::string("Bearer ") + kTokenA}});
  EXPECT_FALSE(checkAccess(scoped, p));
  ASSERT_TRUE(scoped.principal) << "a token that is sent still limits the names";
  EXPECT_TRUE(checkAccess(wrong, p)) << "and a wrong one is refused";
}

// Dapr SDKs send DAPR_API_TOKEN as `dapr-api-token: <token>`: the same tokens, scopes and refusals
// as `Authorization: Bearer`.
TEST(AccessPolicyTest, DaprApiTokenHeader) {
  auto entries = config::parseTokens(std::string(kTokenA) + " prefixes=orders-\n", "f");
  ASSERT_TRUE(entries.isOk());
  TokenVerifier tokens(*entries);
  ListenerPolicy p;
  p.tokens = &tokens;

  Request good = request({{"host", "localhost"}, {"dapr-api-token", std::string(" ") + kTokenA}});
  EXPECT_FALSE(checkAccess(good, p));
  ASSERT_TRUE(good.principal);
  EXPECT_EQ(good.principal->scopes, std::vector<std::string>{"orders-"}) << "its prefixes apply";
  // Tabs around it are HTTP's optional whitespace too, not part of the token.
  Request tabbed =
      request({{"host", "localhost"}, {"dapr-api-token", std::string("\t") + kTokenA + " \t"}});
  EXPECT_FALSE(checkAccess(tabbed, p));
  ASSERT_TRUE(tabbed.principal);

  Request wrong = request({{"host", "localhost"}, {"dapr-api-token", "wrongwrongwrongwrong"}});
  auto refusal = checkAccess(wrong, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 401);
  EXPECT_EQ(refusal->code, kInvalidToken);
  EXPECT_FALSE(wrong.principal);

  Request with_scheme =
      request({{"host", "localhost"}, {"dapr-api-token", std::string("Bearer ") + kTokenA}});
  EXPECT_TRUE(checkAccess(with_scheme, p)) << "Dapr's header carries the bare token";

  Request empty = request({{"host", "localhost"}, {"dapr-api-token", ""}});
  refusal = checkAccess(empty, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, kTokenRequired);
  EXPECT_NE(refusal->message.find("dapr-api-token"), std::string::npos);

  Request both_same = request({{"host", "localhost"},
                               {"authorization", std::string("Bearer ") + kTokenA},
                               {"dapr-api-token", kTokenA}});
  EXPECT_FALSE(checkAccess(both_same, p));
  Request both_differ = request({{"host", "localhost"},
                                 {"authorization", std::string("Bearer ") + kTokenA},
                                 {"dapr-api-token", "wrongwrongwrongwrong"}});
  refusal = checkAccess(both_differ, p);
  ASSERT_TRUE(refusal) << "a valid bearer does not cover a different dapr-api-token";
  EXPECT_EQ(refusal->code, kInvalidToken);
  EXPECT_FALSE(both_differ.principal);

  // A credential sent twice is refused whatever the order (it was first-one-wins), also when
  // both copies carry valid tokens.
  for (const char* name : {"authorization", "dapr-api-token"}) {
    const std::string prefix = std::string(name) == "authorization" ? "Bearer " : "";
    Request twice =
        request({{"host", "localhost"}, {name, prefix + kTokenA}, {name, prefix + kTokenA}});
    refusal = checkAccess(twice, p);
    ASSERT_TRUE(refusal) << name;
    EXPECT_EQ(refusal->code, kInvalidToken);
    EXPECT_NE(refusal->message.find("more than one"), std::string::npos);
    EXPECT_FALSE(twice.principal);
  }

  p.token_required = false;  // the Unix socket: a token that is sent is still checked
  EXPECT_TRUE(checkAccess(wrong, p));
}

TEST(AccessPolicyTest, PeerUidAllowList) {
  ListenerPolicy p;
  p.allowed_uids = {1000, 0};
  auto from = [](uint32_t uid, bool has_credentials) {
    auto peer = std::make_shared<PeerIdentity>();
    peer->transport = PeerIdentity::Transport::kUnix;
    peer->has_credentials = has_credentials;
    peer->uid = uid;
    Request r = request({{"host", "localhost"}});
    r.peer = std::move(peer);
    return r;
  };
  Request allowed = from(1000, true);
  EXPECT_FALSE(checkAccess(allowed, p));
  Request other = from(1001, true);
  auto refusal = checkAccess(other, p);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 403);
  EXPECT_EQ(refusal->code, kPeerNotAllowed);
  EXPECT_NE(refusal->message.find("uid 1001"), std::string::npos);
  Request unknown = from(1000, false);
  EXPECT_TRUE(checkAccess(unknown, p)) << "no credentials: refused (fail closed)";
  p.allowed_uids.clear();
  EXPECT_FALSE(checkAccess(other, p)) << "no list: the socket's mode decides";
}

TEST(LockScopeTest, PrefixesLimitLockNames) {
  Principal scoped{"f line 1", {"orders-", "jobs:"}};
  Principal everything{"f line 2", {}};
  EXPECT_TRUE(api::LockApi::mayUseLock(nullptr, "anything"));
  EXPECT_TRUE(api::LockApi::mayUseLock(&everything, "anything"));
  EXPECT_TRUE(api::LockApi::mayUseLock(&scoped, "orders-42"));
  EXPECT_TRUE(api::LockApi::mayUseLock(&scoped, "jobs:nightly"));
  EXPECT_FALSE(api::LockApi::mayUseLock(&scoped, "orders"));
  EXPECT_FALSE(api::LockApi::mayUseLock(&scoped, "invoices-1"));
  EXPECT_FALSE(api::LockApi::mayUseLock(&scoped, ""));
}

// The same matcher as the Router's (http::PathPattern): a {param} is one non-empty segment.
TEST(PathIsListed, AParameterMatchesOneNonEmptySegment) {
  const PathList listed = {"/healthz", "/v1/elections/{name}/ready"};
  EXPECT_TRUE(pathIsListed(listed, "/healthz"));
  EXPECT_TRUE(pathIsListed(listed, "/v1/elections/scheduler/ready"));
  EXPECT_TRUE(pathIsListed(listed, "/v1/elections/a%2Fb/ready"));
  EXPECT_FALSE(pathIsListed(listed, "/healthz/"));
  EXPECT_FALSE(pathIsListed(listed, "/healthzz"));
  EXPECT_FALSE(pathIsListed(listed, "/v1/elections//ready"));
  EXPECT_FALSE(pathIsListed(listed, "/v1/elections/a/b/ready"));
  EXPECT_FALSE(pathIsListed(listed, "/v1/elections/a/ready/x"));
  EXPECT_FALSE(pathIsListed(listed, "/v1/elections/a"));
  EXPECT_FALSE(pathIsListed(listed, ""));
  EXPECT_FALSE(pathIsListed(listed, "/v1/elections/a%zz/ready")) << "a bad escape lists nothing";
  EXPECT_TRUE(pathIsListed(listed, "/health%7A")) << "decoded as the router decodes it";
  EXPECT_FALSE(pathIsListed({"/v1/elections/{name"}, "/v1/elections/{name")) << "a bad pattern";
  EXPECT_FALSE(pathIsListed({}, "/healthz"));
}

}  // namespace
}  // namespace sidelock::http
