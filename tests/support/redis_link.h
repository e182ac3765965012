// A blocking Redis connection for tests (hiredis' synchronous API): for checking or changing what
// a sidecar left in Redis, or for a resource the test owns. One per thread; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct redisContext;

namespace sidelock::testing {

/// Connects to 127.0.0.1:port, or host:port (5 s connect timeout; commands time out after
/// `command_timeout_ms`, never when 0); throws on failure.
class RedisLink {
 public:
  explicit RedisLink(int port) : RedisLink("127.0.0.1", port) {}
  RedisLink(const std::string& host, int port, int command_timeout_ms = 5000);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  /// Runs one command; integer replies and arrays of integers come back as numbers, a nil as
  /// nothing, a string as its number if it is one. Throws on connection or reply errors.
  std::vector<int64_t> command(const std::vector<std::string>& args);
  /// Runs one command whose reply is a status or bulk string ("" for nil).
  std::string text(const std::vector<std::string>& args);
  /// Runs one command and returns what `redis-cli` prints for its reply when stdout is not a
  /// terminal, trimmed: strings, statuses and errors as they are, integers in decimal, nil as
  /// nothing, array elements one per line (nested arrays flattened). Throws only when the
  /// connection fails.
  std::string output(const std::vector<std::string>& args);

 private:
  redisContext* ctx_ = nullptr;
};

}  // namespace sidelock::testing
