#include "common/percent_encoding.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace sidelock {
namespace {

TEST(PercentEncodingTest, UnreservedKeepsOnlyRfc3986Unreserved) {
  EXPECT_EQ(percentEncode("", PercentKeep::kUnreserved), "");
  EXPECT_EQ(percentEncode("abc-XYZ_0.9~", PercentKeep::kUnreserved), "abc-XYZ_0.9~");
  EXPECT_EQ(percentEncode("a/b c?d#e%", PercentKeep::kUnreserved), "a%2Fb%20c%3Fd%23e%25");
  EXPECT_EQ(percentEncode("svc:job@eu", PercentKeep::kUnreserved), "svc%3Ajob%40eu");
  EXPECT_EQ(percentEncode("k=v&w+x", PercentKeep::kUnreserved), "k%3Dv%26w%2Bx");
}

TEST(PercentEncodingTest, PathSegmentAlsoKeepsColonAndAt) {
  EXPECT_EQ(percentEncode("", PercentKeep::kPathSegment), "");
  EXPECT_EQ(percentEncode("svc:job@eu", PercentKeep::kPathSegment), "svc:job@eu");
  EXPECT_EQ(percentEncode("a/b c?d#e%", PercentKeep::kPathSegment), "a%2Fb%20c%3Fd%23e%25");
  EXPECT_EQ(percentEncode("\xc3\xa9", PercentKeep::kPathSegment), "%C3%A9");  // UTF-8 é
}

TEST(PercentEncodingTest, GrpcMessageKeepsPrintableAsciiButPercent) {
  EXPECT_EQ(percentEncode("", PercentKeep::kGrpcMessage), "");
  EXPECT_EQ(percentEncode("lock a/b: held {x} ~!", PercentKeep::kGrpcMessage),
            "lock a/b: held {x} ~!");
  EXPECT_EQ(percentEncode("100%", PercentKeep::kGrpcMessage), "100%25");
  EXPECT_EQ(percentEncode("a\tb\nc\x7f", PercentKeep::kGrpcMessage), "a%09b%0Ac%7F");
  EXPECT_EQ(percentEncode("caf\xc3\xa9", PercentKeep::kGrpcMessage), "caf%C3%A9");
}

TEST(PercentEncodingTest, EveryByteOfEverySet) {
  // Each byte alone: kept exactly when it is in the set, else upper-case %XX.
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    const bool unreserved = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
                            (b >= '0' && b <= '9') || b == '-' || b == '.' || b == '_' || b == '~';
    const bool path = unreserved || b == ':' || b == '@';
    const bool message = b >= 0x20 && b <= 0x7E && b != '%';
    char hex[4];
    std::snprintf(hex, sizeof hex, "%%%02X", b);
    EXPECT_EQ(percentEncode(one, PercentKeep::kUnreserved), unreserved ? one : hex) << b;
    EXPECT_EQ(percentEncode(one, PercentKeep::kPathSegment), path ? one : hex) << b;
    EXPECT_EQ(percentEncode(one, PercentKeep::kGrpcMessage), message ? one : hex) << b;
  }
  // NUL inside a name is encoded, not a terminator.
  EXPECT_EQ(percentEncode(std::string("a\0b", 3), PercentKeep::kUnreserved), "a%00b");
}

TEST(PercentEncodingTest, AppendKeepsWhatIsThere) {
  std::string out = "/v1/locks/";
  appendPercentEncoded(out, "plain", PercentKeep::kUnreserved);
  EXPECT_EQ(out, "/v1/locks/plain");
  appendPercentEncoded(out, "/a b", PercentKeep::kUnreserved);
  EXPECT_EQ(out, "/v1/locks/plain%2Fa%20b");
  appendPercentEncoded(out, "", PercentKeep::kUnreserved);
  EXPECT_EQ(out, "/v1/locks/plain%2Fa%20b");
}

}  // namespace
}  // namespace sidelock
