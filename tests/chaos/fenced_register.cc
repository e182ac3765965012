#include "chaos/fenced_register.h"

namespace sidelock::testing::chaos {

namespace {

// KEYS[1]: the register (a hash: value, fence, accepted); KEYS[2]: the list of accepted tokens.
// ARGV: token, mode ("read", "write", "blind_read", "blind_write"), value.
// Tokens stay below 2^53 (Lua numbers are doubles), also when seeded from Redis TIME in µs.
constexpr const char* kRegisterScript = R"lua(
local mode = ARGV[2]
if mode == 'read' or mode == 'write' then
  local token = tonumber(ARGV[1])
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if token < fence then return {0, fence} end
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
if mode == 'read' or mode == 'blind_read' then
  return {1, tonumber(redis.call('HGET', KEYS[1], 'value') or '0')}
end
redis.call('HSET', KEYS[1], 'value', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
redis.call('RPUSH', KEYS[2], ARGV[1])
return {1, tonumber(ARGV[3])}
)lua";

std::string tokensKey(const std::string& key) { return key + ":tokens"; }

}  // namespace

FencedRegister::Access FencedRegister::read(const std::string& key, uint64_t token, bool fenced) {
  auto r = link_.command({"EVAL", kRegisterScript, "2", key, tokensKey(key), std::to_string(token),
                          fenced ? "read" : "blind_read", "0"});
  return Access{r.at(0) == 1, r.at(1)};
}

FencedRegister::Access FencedRegister::write(const std::string& key, uint64_t token, int64_t value,
                                             bool fenced) {
  auto r = link_.command({"EVAL", kRegisterScript, "2", key, tokensKey(key), std::to_string(token),
                          fenced ? "write" : "blind_write", std::to_string(value)});
  return Access{r.at(0) == 1, r.at(1)};
}

int64_t FencedRegister::acceptedWrites(const std::string& key) {
  auto r = link_.command({"HGET", key, "accepted"});
  return r.empty() ? 0 : r[0];
}

std::vector<std::string> FencedRegister::check(const std::string& key, bool fenced) {
  std::vector<std::string> violations;
  auto value = link_.command({"HGET", key, "value"});
  const int64_t counter = value.empty() ? 0 : value[0];
  const int64_t accepted = acceptedWrites(key);
  if (counter != accepted) {
    violations.push_back("lost updates: register " + key + " counts " + std::to_string(counter) +
                         " after " + std::to_string(accepted) + " accepted increments");
  }
  if (fenced) {
    auto tokens = link_.command({"LRANGE", tokensKey(key), "0", "-1"});
    for (size_t i = 1; i < tokens.size(); ++i) {
      if (tokens[i] < tokens[i - 1]) {
        violations.push_back("fencing: register " + key + " accepted token " +
                             std::to_string(tokens[i]) + " after " + std::to_string(tokens[i - 1]));
      }
    }
  }
  return violations;
}

}  // namespace sidelock::testing::chaos
