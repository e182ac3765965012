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
  EXPECT_EQ(parseError("{not json"), "request body is not valid JSON");
  EXPECT_EQ(parseError("{\"owner\":\"a\"} x"), "request body is not valid JSON");
  EXPECT_EQ(parseError("[1,2]"), "request body must be a JSON object");
  EXPECT_EQ(parseError("3"), "request body must be a JSON object");
  EXPECT_EQ(parseError("{}", "text/xml"),
            "request body must be JSON (Content-Type: application/json)");
}

TEST(RequestBody, NamesTheSmallestUnknownTopLevelField) {
  // A DOM lists its keys sorted; nested keys are never checked.
  EXPECT_EQ(parseError(R"({"zz":1,"aa":{"bb":2},"owner":"x"})"), "unknown field \"aa\"");
  EXPECT_EQ(parseError(R"({"owner":"x","ttl_ms":{"zz":1}})"), "");
}

TEST(RequestBody, ReadsTypedFieldsAndKeepsTheLastOfDuplicates) {
  RequestBody body;
  ASSERT_TRUE(
      body.parse("", R"({"ttl_ms":5,"ttl_ms":7,"auto_renew":true,"owner":"o"})", kAcquireFields));
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

TEST(RequestBody, IntegerChecks) {
  for (const char* text :
       {R"({"ttl_ms":"10"})", R"({"ttl_ms":1.5})", R"({"ttl_ms":null})", R"({"ttl_ms":[1]})"}) {
    RequestBody body;
    ASSERT_TRUE(body.parse("", text, kAcquireFields)) << text;
    int64_t ttl = 0;
    EXPECT_FALSE(body.readInt(BodyField::kTtlMs, 1, 10, ttl)) << text;
    EXPECT_EQ(body.error(), "ttl_ms must be an integer") << text;
  }
  for (const char* text : {R"({"ttl_ms":0})", R"({"ttl_ms":-1})", R"({"ttl_ms":11})",
                           R"({"ttl_ms":9223372036854775808})"}) {
    RequestBody body;
    ASSERT_TRUE(body.parse("", text, kAcquireFields)) << text;
    int64_t ttl = 0;
    EXPECT_FALSE(body.readInt(BodyField::kTtlMs, 1, 10, ttl)) << text;
    EXPECT_EQ(body.error(), "ttl_ms must be between 1 and 10") << text;
  }
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

}  // namespace
}  // namespace sidelock::api
