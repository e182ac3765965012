#include "redis/scripts.h"

#include <algorithm>
#include <cstdlib>

namespace sidelock::backend {
namespace {

// The next fencing token of KEYS[2], shared by every script that grants. A missing counter (first
// grant of the name, Redis restarted empty, the counter expired) starts at Redis's TIME in
// microseconds, built as a string: above every token handed out before as long as the assumptions
// in scripts.h hold. Every grant then pushes the counter's expiry out to `counter_ttl_ms`. INCR's
// reply reaches Lua as a double: exact below 2^53 (TIME in us is ~1.8e15 in 2026, 2^53 is ~9e15,
// i.e. the year 2255), and a Lua number goes back to the client as an integer.
// redis.replicate_commands() lets Redis < 5 write after TIME (a no-op from Redis 5 on).
constexpr std::string_view kNextTokenLua = R"lua(
redis.replicate_commands()
local function nextToken(counter_ttl_ms)
  if redis.call('EXISTS', KEYS[2]) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], counter_ttl_ms)
  return token
end
)lua";

// SET NX PX and the token run in one script so a grant and its fencing token are atomic: no other
// client can observe the lease without its token, and a failed SET never burns a token.
constexpr std::string_view kAcquireBodyLua = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, nextToken(ARGV[3]), tonumber(ARGV[2])}
end
return {0, 0, redis.call('PTTL', KEYS[1])}
)lua";

// Compare-and-delete: never GET then DEL from the client (another owner may win in between).
// On Redis Cluster (ARGV[4] = kShardedPublish) the release is announced with SPUBLISH: the
// channel carries the lock's `{name}` hash tag, so it stays in the script's slot and reaches only
// the subscribers of that shard instead of being broadcast over the cluster bus.
constexpr std::string_view kReleaseLua = R"lua(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[4] == 'sharded' then
    redis.call('SPUBLISH', ARGV[2], ARGV[3])
  else
    redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return 1
elseif v then
  return 0
end
return -1
)lua";

// PEXPIRE only an existing key we own: re-creating a missing key would silently re-acquire a lock
// that expired and may since have been granted to (and released by) someone else.
constexpr std::string_view kExtendLua = R"lua(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('PTTL', KEYS[1])}
elseif v then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {-1, -2}
)lua";

// Redlock's token sync: raises a node's fencing counter to at least ARGV[1] (never lowers it) and
// pushes its expiry out to ARGV[2] (ms). Comparing as Lua doubles is exact for counters below
// 2^53; the value written is ARGV[1] itself (a string), never a formatted double.
constexpr std::string_view kTokenSyncLua = R"lua(
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
)lua";

// The token counter is returned as the raw string: Lua numbers are doubles.
constexpr std::string_view kInspectLua = R"lua(
local exists = redis.call('EXISTS', KEYS[1])
return {exists, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
)lua";

// Release with hand-off: the next owner's grant replaces ours in the same step, with the next
// fencing token (as acquire would give it). No PUBLISH: the lock never became free.
constexpr std::string_view kReleaseGrantBodyLua = R"lua(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, nextToken(ARGV[4]), tonumber(ARGV[3])}
elseif v then
  return {0, 0, redis.call('PTTL', KEYS[1])}
end
return {-1, 0, 0}
)lua";

// An operator's force release: delete the lease whoever holds it and announce it like a release.
// The reply has inspect's shape ({deleted 0|1, 0, token counter or nil}) so one decoder serves
// both; the counter is read, never changed (the next grant gets the next token).
constexpr std::string_view kForceReleaseLua = R"lua(
local deleted = redis.call('DEL', KEYS[1])
if deleted == 1 then
  if ARGV[3] == 'sharded' then
    redis.call('SPUBLISH', ARGV[1], ARGV[2])
  else
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
end
return {deleted, 0, redis.call('GET', KEYS[2])}
)lua";

constexpr std::string_view kChannelInfix = "released:{";

}  // namespace

std::string_view scriptText(ScriptId id) {
  static const std::string kAcquireLua = std::string(kNextTokenLua) + std::string(kAcquireBodyLua);
  static const std::string kReleaseGrantLua =
      std::string(kNextTokenLua) + std::string(kReleaseGrantBodyLua);
  switch (id) {
    case ScriptId::kAcquire:
      return kAcquireLua;
    case ScriptId::kRelease:
      return kReleaseLua;
    case ScriptId::kExtend:
      return kExtendLua;
    case ScriptId::kInspect:
      return kInspectLua;
    case ScriptId::kTokenSync:
      return kTokenSyncLua;
    case ScriptId::kReleaseGrant:
      return kReleaseGrantLua;
    case ScriptId::kForceRelease:
      return kForceReleaseLua;
  }
  return {};
}

int64_t tokenCounterTtlMs(int64_t max_ttl_ms) {
  return std::max<int64_t>(max_ttl_ms, 0) + kTokenCounterMarginMs;
}

const char* scriptName(ScriptId id) {
  switch (id) {
    case ScriptId::kAcquire:
      return "acquire";
    case ScriptId::kRelease:
      return "release";
    case ScriptId::kExtend:
      return "extend";
    case ScriptId::kInspect:
      return "inspect";
    case ScriptId::kTokenSync:
      return "token_sync";
    case ScriptId::kReleaseGrant:
      return "release_grant";
    case ScriptId::kForceRelease:
      return "force_release";
  }
  return "unknown";
}

std::shared_ptr<const RedisScriptSet> sidelockScripts() {
  static const auto kSet = [] {
    auto set = std::make_shared<RedisScriptSet>();
    for (ScriptId id : kAllScripts) set->push_back({scriptName(id), std::string(scriptText(id))});
    return set;
  }();
  return kSet;
}

std::string lockKey(std::string_view prefix, std::string_view name) {
  std::string k;
  k.reserve(prefix.size() + name.size() + 2);
  k.append(prefix).append("{").append(name).append("}");
  return k;
}

std::string tokenKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":token";
}

std::string releaseChannel(std::string_view prefix, std::string_view name) {
  std::string c;
  c.reserve(prefix.size() + kChannelInfix.size() + name.size() + 1);
  c.append(prefix).append(kChannelInfix).append(name).append("}");
  return c;
}

bool lockNameFromChannel(std::string_view prefix, std::string_view channel, std::string* name) {
  const size_t head = prefix.size() + kChannelInfix.size();
  if (channel.size() < head + 1 || channel.substr(0, prefix.size()) != prefix ||
      channel.substr(prefix.size(), kChannelInfix.size()) != kChannelInfix ||
      channel.back() != '}') {
    return false;
  }
  name->assign(channel.substr(head, channel.size() - head - 1));
  return true;
}

namespace {

Status replyError(const RedisValue& v, std::string_view node) {
  return internalError("redis " + std::string(node) + ": " + v.str);
}

Status badShape(std::string_view node, const char* script) {
  return internalError("redis " + std::string(node) + ": unexpected reply to the " + script +
                       " script");
}

bool isInt(const RedisValue& v) { return v.type == RedisValue::Type::kInteger; }

// An array of at least `n` leading integers.
bool intArray(const RedisValue& v, size_t n) {
  if (v.type != RedisValue::Type::kArray || v.elements.size() < n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!isInt(v.elements[i])) return false;
  }
  return true;
}

}  // namespace

StatusOr<AcquireReply> decodeAcquire(const StatusOr<RedisValue>& reply, std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return replyError(v, node);
  if (!intArray(v, 3)) return badShape(node, "acquire");
  AcquireReply r;
  r.granted = v.elements[0].integer == 1;
  if (r.granted) {
    if (v.elements[1].integer <= 0) return badShape(node, "acquire");
    r.token = static_cast<uint64_t>(v.elements[1].integer);
    r.validity_ms = v.elements[2].integer;
  } else {
    // PTTL -1: a key without expiry (not ours); unknown, so waiters fall back to their backoff.
    r.holder_ttl_ms = v.elements[2].integer >= 0 ? v.elements[2].integer : -1;
  }
  return r;
}

StatusOr<OwnerCheck> decodeRelease(const StatusOr<RedisValue>& reply, std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return replyError(v, node);
  if (!isInt(v)) return badShape(node, "release");
  switch (v.integer) {
    case 1:
      return OwnerCheck::kOk;
    case 0:
      return OwnerCheck::kNotOwner;
    case -1:
      return OwnerCheck::kNotHeld;
    default:
      return badShape(node, "release");
  }
}

StatusOr<ExtendReply> decodeExtend(const StatusOr<RedisValue>& reply, std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return replyError(v, node);
  if (!intArray(v, 2)) return badShape(node, "extend");
  ExtendReply r;
  switch (v.elements[0].integer) {
    case 1:
      r.result = OwnerCheck::kOk;
      r.validity_ms = std::max<int64_t>(0, v.elements[1].integer);
      break;
    case 0:
      r.result = OwnerCheck::kNotOwner;
      break;
    case -1:
      r.result = OwnerCheck::kNotHeld;
      break;
    default:
      return badShape(node, "extend");
  }
  return r;
}

StatusOr<HandOffReply> decodeReleaseGrant(const StatusOr<RedisValue>& reply,
                                          std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return replyError(v, node);
  if (!intArray(v, 3)) return badShape(node, "release_grant");
  HandOffReply r;
  switch (v.elements[0].integer) {
    case 1:
      r.released = OwnerCheck::kOk;
      r.next.granted = true;
      r.next.token = static_cast<uint64_t>(v.elements[1].integer);
      r.next.validity_ms = v.elements[2].integer;
      break;
    case 0:
      r.released = OwnerCheck::kNotOwner;
      r.next.holder_ttl_ms = v.elements[2].integer >= 0 ? v.elements[2].integer : -1;
      break;
    case -1:
      r.released = OwnerCheck::kNotHeld;
      break;
    default:
      return badShape(node, "release_grant");
  }
  return r;
}

StatusOr<LockState> decodeInspect(const StatusOr<RedisValue>& reply, std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return replyError(v, node);
  // Lua turns a trailing nil (no token counter yet) into a shorter array.
  if (!intArray(v, 2)) return badShape(node, "inspect");
  LockState s;
  s.held = v.elements[0].integer == 1;
  s.ttl_ms = s.held ? std::max<int64_t>(0, v.elements[1].integer) : 0;
  if (v.elements.size() >= 3) {
    const RedisValue& t = v.elements[2];
    if (t.type == RedisValue::Type::kString) {
      s.token = std::strtoull(t.str.c_str(), nullptr, 10);
    } else if (isInt(t)) {
      s.token = static_cast<uint64_t>(t.integer);
    }
  }
  return s;
}

StatusOr<ForcedRelease> decodeForceRelease(const StatusOr<RedisValue>& reply,
                                           std::string_view node) {
  StatusOr<LockState> state = decodeInspect(reply, node);
  if (!state.isOk()) return state.status();
  return ForcedRelease{state->held, state->token};
}

}  // namespace sidelock::backend
