// RESP (REdis Serialization Protocol) for our own connections: hiredis formats each command, which
// is appended to the connection's write buffer, and hiredis' redisReader decodes replies into
// RedisValue trees (hiredis is the codec only; the bytes travel on our libuv sockets).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct redisReader;

namespace sidelock::backend {

/// One Redis reply, owned. A Redis error reply ("ERR ...", "WRONGTYPE ...") is a value of type
/// kError; a non-OK Status next to it means there was no reply at all: kUnavailable (link down or
/// lost), kDeadlineExceeded (no reply in time), kCancelled (shutdown).
struct RedisValue {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // kString, kStatus, kError
  std::vector<RedisValue> elements;

  bool isError() const { return type == Type::kError; }
};

using RedisReplyCallback = std::function<void(StatusOr<RedisValue>)>;

/// Appends `argv` as one RESP command (an array of bulk strings) to `out`, formatted by hiredis
/// (redisFormatSdsCommandArgv). Binary safe. Out of memory throws std::bad_alloc, as the append
/// does.
void appendCommand(std::string& out, std::span<const std::string_view> argv);

/// Incremental reply decoder: feed it bytes as they arrive, then take complete replies. Builds
/// RedisValue trees directly (no intermediate redisReply), reusing one root slot.
class RespReader {
 public:
  RespReader();
  ~RespReader();
  RespReader(const RespReader&) = delete;
  RespReader& operator=(const RespReader&) = delete;

  void feed(const char* data, size_t len);
  enum class Result { kReply, kNeedMore, kProtocolError };
  /// kReply: `*out` holds the next complete reply. kProtocolError: error() says why; the stream
  /// cannot be resynchronised, so the connection must be dropped.
  Result next(RedisValue* out);
  std::string error() const;
  /// Forgets buffered bytes and any partial reply (a new connection starts clean).
  void reset();

 private:
  redisReader* reader_ = nullptr;
  RedisValue root_;  // the reply being built; moved out by next()
};

}  // namespace sidelock::backend
