// RequestBody (SAX) must answer every body as the DOM reading it replaced did: same first error,
// same checks, same values.
#include "api/request_body.h"

#include <gtest/gtest.h>

#include "api/json_object.h"

namespace sidelock::api {
namespace {

constexpr std::initializer_list<BodyField> kAcquireFields = {
    BodyField::kTtlMs,     BodyField::kWaitMs,    BodyField::kOwner,
    BodyField::kAutoRenew, BodyField::kMaxHoldMs, BodyField::kHold};

std::string parseError(std::string_view text, std::string_view content_type = "application/json") {
  RequestBody body;
  body.parse(content_type, text, kAcquireFields);
  return body.error();
}

TEST(RequestBody, BlankBodyIsAnEmptyObject) {
  RequestBody body;
  EXPECT_TRUE(body.parse("", " \r\n", kAcquireFields));
  EXPECT_FALSE(body.has(BodyField::kOwner));
}

TEST(RequestBody, RefusesWhatIsNotAJsonObject) {
  EXPECT_EQ(parseError("{not json"), "request body is not valid JSON at byte 3");
  EXPECT_EQ(parseError("not json"), "request body is not valid JSON at byte 2");
  EXPECT_EQ(parseError("{\"owner\":\"a\"} x"),
            "request body is not valid JSON: trailing data after the object at byte 15");
  EXPECT_EQ(parseError("{} {}"),
            "request body is not valid JSON: trailing data after the object at byte 4");
  EXPECT_EQ(parseError("[1,2]"), "request body must be a JSON object");
  EXPECT_EQ(parseError("3"), "request body must be a JSON object");
  EXPECT_EQ(parseError("{}", "text/xml"),
            "request body must be JSON (Content-Type: application/json, charset UTF-8 if given)");
}

TEST(RequestBody, NamesTheSmallestUnknownTopLevelField) {
  // A DOM lists its keys sorted; nested keys are never checked.
  EXPECT_EQ(parseError(R"({"zz":1,"aa":{"bb":2},"owner":"x"})"), "unknown field \"aa\"");
  EXPECT_EQ(parseError(R"({"owner":"x","ttl_ms":{"zz":1}})"), "");
}

TEST(RequestBody, ReadsTypedFields) {
  RequestBody body;
  ASSERT_TRUE(body.parse("", R"({"ttl_ms":7,"auto_renew":true,"owner":"o"})", kAcquireFields));
  int64_t ttl = 0;
  bool renew = false;
  std::string_view owner;
  EXPECT_TRUE(body.readInt(BodyField::kTtlMs, 1, 10, ttl));
  EXPECT_TRUE(body.readBool(BodyField::kAutoRenew, renew));
  EXPECT_TRUE(body.readString(BodyField::kOwner, owner));
  EXPECT_EQ(ttl, 7);
  EXPECT_TRUE(renew);
  EXPECT_EQ(owner, "o");
}

// Issue 11, hostile input: a body means one thing to every reader, or it is refused.
TEST(RequestBody, RefusesDuplicateFields) {
  EXPECT_EQ(parseError(R"({"ttl_ms":5,"ttl_ms":7})"), "field \"ttl_ms\" is given twice");
  EXPECT_EQ(parseError(R"({"owner":"a","ttl_ms":5,"owner":"b"})"),
            "field \"owner\" is given twice");
  // Nested keys belong to a value no field accepts: that is the error, not the duplicate.
  EXPECT_EQ(parseError(R"({"zz":{"a":1,"a":2}})"), "unknown field \"zz\"");
}

TEST(RequestBody, RefusesEverythingAfterANulByte) {
  using namespace std::string_literals;
  EXPECT_EQ(parseError("{\"ttl_ms\":1000}\0garbage"s),
            "request body is not valid JSON: NUL byte at byte 16");
  EXPECT_EQ(parseError("{\"ttl_ms\":1000}\0"s),
            "request body is not valid JSON: NUL byte at byte 16");
  EXPECT_EQ(parseError("{\"owner\":\"a\0b\"}"s),
            "request body is not valid JSON: NUL byte at byte 12");
}

TEST(RequestBody, RefusesInvalidUtf8) {
  EXPECT_EQ(parseError("{\"owner\":\"\xff\"}"),
            "request body is not valid JSON: invalid UTF-8 at byte 11");
  EXPECT_EQ(parseError("{\"owner\":\"\xc3\x28\"}"),  // a lead byte without its continuation
            "request body is not valid JSON: invalid UTF-8 at byte 12");
  EXPECT_EQ(parseError("{\"\xed\xa0\x80\":1}"),  // a UTF-16 surrogate, encoded
            "request body is not valid JSON: invalid UTF-8 at byte 4");
  // nlohmann skips a leading UTF-8 byte-order mark (RFC 8259 lets parsers ignore it).
  EXPECT_EQ(parseError("\xef\xbb\xbf{}"), "");
}

TEST(RequestBody, RefusesDeepNesting) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_EQ(parseError(deep), "request body nests deeper than 16 levels");
  EXPECT_EQ(parseError(R"({"ttl_ms":)" + deep + "}"), "request body nests deeper than 16 levels");
  const std::string ok = std::string(15, '[') + std::string(15, ']');
  EXPECT_EQ(parseError(R"({"zz":)" + ok + "}"), "unknown field \"zz\"");
}

// An integer beyond 64 bits is out of range for its field, not "not an integer" (see
// IntegerChecks); a float beyond a double's range stops the parse but still names its field.
TEST(RequestBody, HugeNumbersAreOutOfRangeForTheirField) {
  EXPECT_EQ(parseError(R"({"wait_ms":1e400})"), "wait_ms is out of range (number too large)");
  EXPECT_EQ(parseError(R"({"zz":-1e400})"),
            "request body is not valid JSON: number too large at byte 12");
}

TEST(RequestBody, ContentTypeIsAMediaTypeNotAPrefix) {
  for (const char* type :
       {"", "application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf-8",
        "APPLICATION/JSON ; Charset=\"utf-8\"", "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded", "application/json; foo=bar", "application/json;"}) {
    EXPECT_TRUE(RequestBody::acceptsContentType(type)) << type;
    EXPECT_EQ(parseError("{}", type), "") << type;
  }
  for (const char* type : {"application/jsonx", "application/json-patch+json", "text/plainx",
                           "application/json; charset=latin1", "application/json charset=utf-8",
                           "application/json; charset", "application", "/json", "application/",
                           "application/json, text/plain", "application/json; a=\"unterminated",
                           "text/xml", "multipart/form-data"}) {
    EXPECT_FALSE(RequestBody::acceptsContentType(type)) << type;
    RequestBody body;
    EXPECT_FALSE(body.parse(type, "{}", kAcquireFields)) << type;
    EXPECT_EQ(body.errorCode(), "unsupported_media_type") << type;
  }
  // A blank body has no media type to check.
  EXPECT_EQ(parseError("", "application/jsonx"), "");
}

TEST(RequestBody, ParsesMediaTypeParameters) {
  MediaType m = parseMediaType(" Text/Plain ; format=flowed; CHARSET=\"UTF-8\" ");
  EXPECT_TRUE(m.valid);
  EXPECT_EQ(m.type, "text/plain");
  EXPECT_EQ(m.charset, "UTF-8");
  EXPECT_FALSE(parseMediaType("text/plain; =x").valid);
  EXPECT_FALSE(parseMediaType("te xt/plain").valid);
}

TEST(RequestBody, IntegerChecks) {
  for (const char* text :
       {R"({"ttl_ms":"10"})", R"({"ttl_ms":1.5})", R"({"ttl_ms":null})", R"({"ttl_ms":[1]})"}) {
    RequestBody body;
    ASSERT_TRUE(body.parse("", text, kAcquireFields)) << text;
    int64_t ttl = 0;
    EXPECT_FALSE(body.readInt(BodyField::kTtlMs, 1, 10, ttl)) << text;
    EXPECT_EQ(body.error(), "ttl_ms must be an integer") << text;
  }
  for (const char* text :
       {R"({"ttl_ms":0})", R"({"ttl_ms":-1})", R"({"ttl_ms":11})",
        R"({"ttl_ms":9223372036854775808})", R"({"ttl_ms":18446744073709551616})",
        R"({"ttl_ms":99999999999999999999999})", R"({"ttl_ms":-99999999999999999999999})"}) {
    RequestBody body;
    ASSERT_TRUE(body.parse("", text, kAcquireFields)) << text;
    int64_t ttl = 0;
    EXPECT_FALSE(body.readInt(BodyField::kTtlMs, 1, 10, ttl)) << text;
    EXPECT_EQ(body.error(), "ttl_ms must be between 1 and 10") << text;
  }
}

// A request_id's retry must send the same request; what does not make it another request leaves
// the fingerprint alone: JSON order and spacing, the health object's member order, wait_ms (gRPC
// cuts it to the time left before the call's deadline on every attempt), fields at their default.
TEST(RequestBody, FingerprintTellsRequestsApartButNotTheirSpelling) {
  const std::initializer_list<BodyField> kFields = {
      BodyField::kTtlMs,     BodyField::kWaitMs, BodyField::kAutoRenew,
      BodyField::kRequestId, BodyField::kMode,   BodyField::kHold,
      BodyField::kHealth,    BodyField::kNames,  BodyField::kLockDelayMs};
  auto fp = [&](std::string_view text) {
    RequestBody body;
    EXPECT_TRUE(body.parse("", text, kFields)) << text << ": " << body.error();
    return body.fingerprint();
  };
  const uint64_t base = fp(
      R"({"ttl_ms":1000,"request_id":"a","health":{"url":"http://127.0.0.1:8080/h","failures":3}})");
  EXPECT_EQ(base, fp(R"({ "health": {"failures": 3, "url": "http://127.0.0.1:8080/h"},
                          "request_id": "b", "ttl_ms": 1000, "wait_ms": 2999 })"));
  EXPECT_EQ(base, fp(R"({"ttl_ms":1000,"auto_renew":false,"mode":"exclusive","hold":"none",
                         "lock_delay_ms":0,"health":{"url":"http://127.0.0.1:8080/h","failures":3}})"));
  EXPECT_NE(base, fp(R"({"ttl_ms":1000,"health":{"url":"http://127.0.0.1:8080/h","failures":4}})"));
  EXPECT_NE(base, fp(R"({"ttl_ms":1001,"health":{"url":"http://127.0.0.1:8080/h","failures":3}})"));
  EXPECT_NE(fp(R"({"ttl_ms":1000})"), fp(R"({"ttl_ms":1000,"auto_renew":true})"));
  EXPECT_NE(fp(R"({"ttl_ms":1000})"), fp(R"({"ttl_ms":1000,"mode":"shared"})"));
  EXPECT_EQ(fp(R"({"names":["a","b"]})"), fp(R"({"names":["b","a"]})"));
  EXPECT_NE(fp(R"({"names":["a","b"]})"), fp(R"({"names":["a","c"]})"));
}

TEST(RequestBody, ReuseForgetsThePreviousBody) {
  RequestBody body;
  ASSERT_TRUE(body.parse("", R"({"owner":"a"})", kAcquireFields));
  ASSERT_TRUE(body.parse("", "{}", {BodyField::kOwner}));
  EXPECT_FALSE(body.has(BodyField::kOwner));
  EXPECT_FALSE(body.parse("", R"({"hold":"none"})", {BodyField::kOwner}));
  EXPECT_EQ(body.error(), "unknown field \"hold\"");
}

TEST(JsonObject, WritesFieldsInOrderWithNlohmannEscaping) {
  EXPECT_EQ(JsonObject()
                .text("name", "n")
                .text("owner", "q\"b\\s\x01")
                .unsignedInteger("token", 18446744073709551615ULL)
                .integer("ttl_ms", -5)
                .boolean("held", false)
                .finish(),
            "{\"name\":\"n\",\"owner\":\"q\\\"b\\\\s\\u0001\",\"token\":18446744073709551615,"
            "\"ttl_ms\":-5,\"held\":false}\n");
}

TEST(RequestBody, HealthObjectKeepsItsMembersOneLevelDeep) {
  RequestBody b;
  ASSERT_TRUE(b.parse("", R"({"health":{"url":"http://127.0.0.1/","interval_ms":500,
                              "failures":2,"deep":{"x":1},"f":1.5,"big":18446744073709551615},
                              "ttl_ms":7})",
                      {BodyField::kHealth, BodyField::kTtlMs}));
  std::vector<BodyMember> members;
  ASSERT_TRUE(b.readObject(BodyField::kHealth, members));
  ASSERT_EQ(members.size(), 6u);
  EXPECT_EQ(members[0].name, "url");
  EXPECT_EQ(members[0].type, BodyMember::Type::kString);
  EXPECT_EQ(members[0].text, "http://127.0.0.1/");
  EXPECT_EQ(members[1].type, BodyMember::Type::kInteger);
  EXPECT_EQ(members[1].integer, 500);
  EXPECT_EQ(members[2].integer, 2);
  EXPECT_EQ(members[3].type, BodyMember::Type::kOther);  // nested deeper
  EXPECT_EQ(members[4].type, BodyMember::Type::kOther);  // a fraction
  EXPECT_EQ(members[5].type, BodyMember::Type::kOther);  // beyond int64
  int64_t ttl = 0;
  EXPECT_TRUE(b.readInt(BodyField::kTtlMs, 1, 100, ttl));  // the top level goes on after it
  EXPECT_EQ(ttl, 7);

  RequestBody not_object;
  ASSERT_TRUE(not_object.parse("", R"({"health":"http://127.0.0.1/"})", {BodyField::kHealth}));
  EXPECT_FALSE(not_object.readObject(BodyField::kHealth, members));
  EXPECT_EQ(not_object.error(), "health must be an object");
}

}  // namespace
}  // namespace sidelock::api
