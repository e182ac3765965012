// The RESP codec of our own Redis connections: command encoding and the incremental reply reader
// (hiredis' redisReader building RedisValue trees in place).
#include "redis/resp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sidelock::backend {
namespace {

using Type = RedisValue::Type;

TEST(RespEncode, CommandIsAnArrayOfBulkStrings) {
  std::string out;
  const std::vector<std::string_view> argv = {"SET", "k", std::string_view("a\0\r\nb", 5)};
  appendCommand(out, argv);
  EXPECT_EQ(out, std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\0\r\nb\r\n", 31));
  // Appends: a second command follows the first in the same buffer.
  const std::vector<std::string_view> ping = {"PING"};
  appendCommand(out, ping);
  EXPECT_TRUE(out.ends_with("*1\r\n$4\r\nPING\r\n"));
  std::string empty_arg;
  const std::vector<std::string_view> empty = {"ECHO", ""};
  appendCommand(empty_arg, empty);
  EXPECT_EQ(empty_arg, "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n");
  // More arguments than fit the stack arrays.
  std::vector<std::string> many(40);
  std::vector<std::string_view> many_argv = {"DEL"};
  for (size_t i = 0; i < many.size(); ++i) many_argv.push_back(many[i] = "k" + std::to_string(i));
  std::string long_command;
  appendCommand(long_command, many_argv);
  EXPECT_TRUE(long_command.starts_with("*41\r\n$3\r\nDEL\r\n$2\r\nk0\r\n")) << long_command;
  EXPECT_TRUE(long_command.ends_with("$3\r\nk39\r\n"));
}

TEST(RespRead, EveryReplyTypeAndNesting) {
  RespReader r;
  const std::string wire =
      "+OK\r\n-ERR wrong\r\n:-42\r\n$3\r\nabc\r\n$-1\r\n*0\r\n*-1\r\n"
      "*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n+s\r\n";
  r.feed(wire.data(), wire.size());
  RedisValue v;
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kStatus);
  EXPECT_EQ(v.str, "OK");
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_TRUE(v.isError());
  EXPECT_EQ(v.str, "ERR wrong");
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kInteger);
  EXPECT_EQ(v.integer, -42);
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kString);
  EXPECT_EQ(v.str, "abc");
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kNil);
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kArray);
  EXPECT_TRUE(v.elements.empty());
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.type, Type::kNil) << "a null array";
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  ASSERT_EQ(v.type, Type::kArray);
  ASSERT_EQ(v.elements.size(), 3u);
  EXPECT_EQ(v.elements[0].integer, 1);
  ASSERT_EQ(v.elements[1].elements.size(), 2u);
  EXPECT_EQ(v.elements[1].elements[0].str, "x");
  EXPECT_EQ(v.elements[1].elements[1].type, Type::kNil);
  EXPECT_EQ(v.elements[2].type, Type::kStatus);
  EXPECT_EQ(r.next(&v), RespReader::Result::kNeedMore);
}

TEST(RespRead, RepliesSplitAtEveryByte) {
  RespReader r;
  const std::string wire = "*2\r\n$5\r\nhello\r\n:7\r\n:8\r\n";
  std::vector<RedisValue> replies;
  for (char c : wire) {
    r.feed(&c, 1);
    RedisValue v;
    while (r.next(&v) == RespReader::Result::kReply) replies.push_back(std::move(v));
  }
  ASSERT_EQ(replies.size(), 2u);
  ASSERT_EQ(replies[0].elements.size(), 2u);
  EXPECT_EQ(replies[0].elements[0].str, "hello");
  EXPECT_EQ(replies[0].elements[1].integer, 7);
  EXPECT_EQ(replies[1].integer, 8);
}

TEST(RespRead, ProtocolErrorIsReportedAndResetStartsClean) {
  RespReader r;
  const std::string partial = "*2\r\n:1\r\n";  // an array left half-built
  r.feed(partial.data(), partial.size());
  RedisValue v;
  EXPECT_EQ(r.next(&v), RespReader::Result::kNeedMore);
  const std::string garbage = "?what\r\n";
  r.feed(garbage.data(), garbage.size());
  EXPECT_EQ(r.next(&v), RespReader::Result::kProtocolError);
  EXPECT_FALSE(r.error().empty());
  r.reset();
  const std::string ok = ":5\r\n";
  r.feed(ok.data(), ok.size());
  ASSERT_EQ(r.next(&v), RespReader::Result::kReply);
  EXPECT_EQ(v.integer, 5);
}

}  // namespace
}  // namespace sidelock::backend
