// What "the next token" means since counters follow Redis's clock
// (src/redis/lua/lib/next_token.lua). On one master (single Redis, Sentinel, Cluster) a grant's
// token is one more than the last, or Redis's TIME in microseconds when that is higher: nearly
// always, as a name is rarely granted twice in one microsecond. A test that checks a grant came
// next reads Redis's clock after it and accepts both.
#pragma once

#include <cstdint>
#include <string>

namespace sidelock::testing {

/// Redis's TIME in microseconds, from the two lines `redis-cli TIME` prints (RedisServer::cli).
inline uint64_t clockUsOf(const std::string& time_reply) {
  const size_t split = time_reply.find('\n');
  if (split == std::string::npos) return 0;
  return std::stoull(time_reply.substr(0, split)) * 1'000'000 +
         std::stoull(time_reply.substr(split + 1));
}

/// Whether `token` is the grant after `last` on one master; `clock_us` is Redis's clock read
/// after that grant (clockUsOf).
inline bool isNextToken(uint64_t last, uint64_t token, uint64_t clock_us) {
  return token == last + 1 || (token > last + 1 && token <= clock_us);
}

}  // namespace sidelock::testing
