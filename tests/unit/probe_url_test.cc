// Which health URLs a hold may name (src/health/probe_url.h): loopback over plain http only.
#include "health/probe_url.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace sidelock::health {
namespace {

TEST(ProbeUrlTest, LoopbackFormsAreAccepted) {
  auto v4 = parseProbeUrl("http://127.0.0.1:8080/healthz?full=1");
  ASSERT_TRUE(v4.isOk()) << v4.status().toString();
  EXPECT_EQ(v4->host, "127.0.0.1:8080");
  EXPECT_EQ(v4->target, "/healthz?full=1");
  const auto* sa = reinterpret_cast<const sockaddr_in*>(&v4->address);
  EXPECT_EQ(sa->sin_family, AF_INET);
  EXPECT_EQ(ntohs(sa->sin_port), 8080);

  auto other = parseProbeUrl("HTTP://127.9.8.7");
  ASSERT_TRUE(other.isOk());
  EXPECT_EQ(other->target, "/");
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(&other->address)->sin_port), 80);

  auto v6 = parseProbeUrl("http://[::1]:9/ready");
  ASSERT_TRUE(v6.isOk());
  EXPECT_EQ(reinterpret_cast<const sockaddr_in6*>(&v6->address)->sin6_family, AF_INET6);
  EXPECT_EQ(v6->host, "[::1]:9");

  auto local = parseProbeUrl("http://LocalHost:3000");
  ASSERT_TRUE(local.isOk());
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&local->address)->sin_addr.s_addr),
            INADDR_LOOPBACK);
  EXPECT_EQ(parseProbeUrl("http://127.0.0.1?x=1")->target, "/?x=1");
}

TEST(ProbeUrlTest, EverythingElseIsRefusedWithAReason) {
  for (const char* bad : {
           "https://127.0.0.1/",                // TLS: plain http only
           "ftp://127.0.0.1/",                  // another scheme
           "127.0.0.1:8080/healthz",            // no scheme
           "http://10.0.0.1/",                  // not loopback
           "http://128.0.0.1/",                 // just outside 127/8
           "http://example.com/",               // a name other than localhost
           "http://localhost.example.com/",     // ...even one that starts like it
           "http://127.0.0.1@evil.example/",    // userinfo trick
           "http://evil.example@127.0.0.1/",    // userinfo, either way round
           "http://user:pw@127.0.0.1/",         // userinfo
           "http://127.1/",                     // short IPv4 forms are not read
           "http://2130706433/",                // nor integers
           "http://0x7f.0.0.1/",                // nor hex
           "http://[::2]/",                     // IPv6 other than ::1
           "http://[::ffff:10.0.0.1]/",         // mapped IPv4
           "http://[::1/",                      // unclosed bracket
           "http://127.0.0.1:0/",               // port 0
           "http://127.0.0.1:65536/",           // port out of range
           "http://127.0.0.1:80x/",             // port not digits
           "http://127.0.0.1:/",                // empty port
           "http://127.0.0.1/a b",              // a space
           "http://127.0.0.1/a\r\nX: y",        // header injection
           "http://127.0.0.1/#frag",            // fragment
           "http://127.0.0.1\\@evil.example/",  // backslash
           "http:///healthz",                   // no host
           "",
       }) {
    auto url = parseProbeUrl(bad);
    EXPECT_FALSE(url.isOk()) << bad;
    if (!url.isOk()) {
      EXPECT_EQ(url.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(url.status().message().find("health.url"), std::string::npos) << bad;
    }
  }
  EXPECT_FALSE(parseProbeUrl("http://127.0.0.1/" + std::string(kMaxProbeUrlBytes, 'a')).isOk());
}

}  // namespace
}  // namespace sidelock::health
