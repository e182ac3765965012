#include "redis/scripts.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <vector>

namespace sidelock::backend {
namespace {

constexpr std::string_view kChannelInfix = "released:{";

}  // namespace

std::string_view scriptText(ScriptId id) { return scriptSource(id).text; }

int64_t tokenCounterTtlMs(int64_t max_ttl_ms) {
  return std::max<int64_t>(max_ttl_ms, 0) + kTokenCounterMarginMs;
}

std::string grantCounterArg(const ScriptContext& ctx) {
  if (ctx.token_floor == ScriptContext::TokenFloor::kSecond) return ctx.counter_ttl_ms;
  return ctx.counter_ttl_ms + " us";
}

// The name is a view of a string literal in the generated table: NUL-terminated.
const char* scriptName(ScriptId id) { return scriptSource(id).name.data(); }

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

std::string semaphoreKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem";
}

std::string semaphoreTokenKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem:token";
}

std::string semaphoreLimitKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem:limit";
}

std::string writerMarkKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":writer";
}

std::string holderRecordKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":holder";
}

std::string grantRecordKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":granted";
}

std::string readersKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":readers";
}

std::string readerHoldersKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":readers:holders";
}

std::string permitHoldersKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem:holders";
}

std::string fairQueueKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":fair";
}

std::string fairClaimsKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":fair:claims";
}

std::string electionKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":el";
}

std::string electionTokenKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":el:token";
}

std::string electionLeaderKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":el:leader";
}

std::string lockDelayKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":delay";
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

bool isHexSha(std::string_view s) {
  return s.size() >= 40 && std::all_of(s.begin(), s.begin() + 40, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Removes every "<marker><40 hex digits><rest>" from `text`, where `rest` runs up to and
// including `end` (or to the end of the text).
void eraseShaClauses(std::string& text, std::string_view marker, std::string_view end) {
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at)) {
    const size_t sha = at + marker.size();
    if (!isHexSha(std::string_view(text).substr(sha))) {
      at = sha;
      continue;
    }
    const size_t stop = text.find(end, sha + 40);
    text.erase(at, stop == std::string::npos ? std::string::npos : stop + end.size() - at);
  }
}

// Removes the script's line numbers: "user_script:12: " (a Lua runtime error) and Redis 6's
// "@user_script:12: " / "@user_script: 12: ".
void eraseScriptLines(std::string& text) {
  static constexpr std::string_view kMarker = "user_script:";
  for (size_t at = text.find(kMarker); at != std::string::npos; at = text.find(kMarker, at)) {
    size_t i = at + kMarker.size();
    if (at > 0 && text[at - 1] == '@') --at;
    if (i < text.size() && text[i] == ' ') ++i;
    const size_t digits = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == digits || i + 1 >= text.size() || text[i] != ':' || text[i + 1] != ' ') {
      at = i;
      continue;
    }
    text.erase(at, i + 2 - at);
  }
}

Status badShape(std::string_view node, ScriptId script) {
  return internalError("redis " + std::string(node) + ": unexpected reply to the " +
                       scriptName(script) + " script");
}

// The replies of the elections' own scripts (ScriptReply::kLeader; each file states its own):
//   election_campaign  {1, term, ttl, 1, since_ms} elected; {0, 0, PTTL} busy; {3, 0, PTTL} ours
//   election_proclaim  {1, term, PTTL, 1}; {0, 0, PTTL} not the leader; {-1, 0, 0} nobody leads
//   election_leader    {1, term, PTTL, candidate, value, since_ms, lease}; {-1, last term, 0}
// Anything else (another code for the script, a field more or less, a text where a number goes)
// is a reply of the wrong shape.
StatusOr<Outcome> decodeLeaderOutcome(const RedisValue& v, ScriptId script, std::string_view node) {
  const std::vector<RedisValue>& e = v.elements;
  auto isInteger = [&e](size_t i) {
    return i < e.size() && e[i].type == RedisValue::Type::kInteger;
  };
  if (v.type != RedisValue::Type::kArray || !isInteger(0) || !isInteger(1) || !isInteger(2)) {
    return badShape(node, script);
  }
  const bool campaign = script == ScriptId::kElectionCampaign;
  const bool leader = script == ScriptId::kElectionLeader;
  const int64_t code = e[0].integer;
  const int64_t token = e[1].integer;
  const int64_t ttl = e[2].integer;
  Outcome o;
  if (code == 1) {
    o.code = OutcomeCode::kOk;
    o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
    o.validity_ms = std::max<int64_t>(0, ttl);  // PTTL -1 (no expiry: not ours) reads as 0 left
    if (leader) {
      auto isText = [&e](size_t i) { return e[i].type == RedisValue::Type::kString; };
      if (e.size() != 7 || token < 0 || !isText(3) || !isText(4) || !isInteger(5) ||
          e[5].integer < 0 || !isText(6)) {
        return badShape(node, script);
      }
      o.leader = LeaderRecord{e[3].str, e[4].str, e[5].integer, e[6].str};
      return o;
    }
    // A grant always carries its term and its since; a proclaim reads the term back.
    if (e.size() != (campaign ? 5u : 4u) || !isInteger(3) || e[3].integer != 1 || token < 0 ||
        (campaign && (token == 0 || !isInteger(4) || e[4].integer <= 0))) {
      return badShape(node, script);
    }
    o.holds = 1;
    if (campaign) o.leader.since_ms = e[4].integer;
    return o;
  }
  if (e.size() != 3) return badShape(node, script);
  if (code == -1 && !campaign) {
    o.code = OutcomeCode::kNotHeld;
    o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
    return o;
  }
  if ((code == 0 && !leader) || (code == 3 && campaign)) {
    o.code = campaign ? OutcomeCode::kBusy : OutcomeCode::kNotOwner;
    if (code == 3) o.busy_reason = BusyReason::kHeldByYou;
    o.holder_ttl_ms = ttl >= 0 ? ttl : -1;  // -1: a key without expiry, unknown
    return o;
  }
  return badShape(node, script);
}

}  // namespace

std::string clientVisibleRedisError(std::string_view redis_error) {
  std::string text(redis_error);
  // Redis 7: "<message> script: <sha>, on @user_script:<line>." appended to every error.
  eraseShaClauses(text, " script: ", ".");
  // Redis 6: "ERR Error running script (call to f_<sha>): @user_script:12: <message>".
  eraseShaClauses(text, "Error running script (call to f_", "): ");
  eraseScriptLines(text);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.starts_with("ERR ") && text.size() > 4 && text[4] == '-') text.erase(0, 5);  // "-OOM"
  return text;
}

Status scriptErrorStatus(std::string_view node, std::string_view redis_error) {
  std::string message = clientVisibleRedisError(redis_error);
  if (message.starts_with("OOM ") || message.starts_with("-OOM ")) {
    if (message.front() == '-') message.erase(0, 1);
    return resourceExhausted("redis " + std::string(node) +
                             " is out of memory (maxmemory reached): " + message +
                             " Nothing was written; free memory on Redis or raise its maxmemory");
  }
  return internalError("redis " + std::string(node) + ": " + message);
}

namespace {

// Splits "<ms> <rest>" (ms: decimal digits; rest non-empty) off `text`.
bool splitMs(std::string_view text, int64_t* ms, std::string_view* rest) {
  const size_t sep = text.find(' ');
  if (sep == std::string_view::npos || sep == 0 || sep + 1 >= text.size()) return false;
  int64_t n = 0;
  for (char c : text.substr(0, sep)) {
    if (c < '0' || c > '9' || n > (INT64_MAX - 9) / 10) return false;
    n = n * 10 + (c - '0');
  }
  *ms = n;
  *rest = text.substr(sep + 1);
  return true;
}

// "<since_ms> <label>" (lib/holder_record.lua) into the outcome's holder and since_ms.
bool parseHolderRecord(std::string_view record, Outcome* o) {
  std::string_view label;
  if (!splitMs(record, &o->since_ms, &label)) return false;
  o->holder.assign(label);
  return true;
}

// "<since_ms> <ttl_ms> <label>" entries (lib/lease_labels.lua, listLabels) into the outcome's
// holders.
bool parseLeaseHolders(const RedisValue& list, Outcome* o) {
  if (list.elements.size() > static_cast<size_t>(kMaxListedHolders)) return false;
  for (const RedisValue& e : list.elements) {
    if (e.type != RedisValue::Type::kString) return false;
    LeaseHolder h;
    std::string_view rest;
    std::string_view label;
    if (!splitMs(e.str, &h.since_ms, &rest) || !splitMs(rest, &h.ttl_ms, &label)) return false;
    h.holder.assign(label);
    o->holders.push_back(std::move(h));
  }
  return true;
}

}  // namespace

bool isSharedScript(ScriptId id) { return scriptSource(id).reply == ScriptReply::kShared; }

bool isSemaphoreScript(ScriptId id) { return scriptSource(id).reply == ScriptReply::kSemaphore; }

StatusOr<Outcome> decodeOutcome(const StatusOr<RedisValue>& reply, ScriptId script,
                                std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return scriptErrorStatus(node, v.str);
  if (scriptSource(script).reply == ScriptReply::kAcquireAll) {
    return badShape(node, script);  // decodeAllOutcome()'s
  }
  if (scriptSource(script).reply == ScriptReply::kLeader) {
    return decodeLeaderOutcome(v, script, node);
  }
  const bool semaphore = isSemaphoreScript(script);
  const bool shared = isSharedScript(script);
  const size_t max_fields = semaphore ? 5 : 4;
  if (v.type != RedisValue::Type::kArray) return badShape(node, script);
  // A mutex script's busy or held reply may end with the holder record: "<since_ms> <label>".
  const bool has_record =
      v.elements.size() > 3 && v.elements.back().type == RedisValue::Type::kString;
  // A reader's or semaphore's held inspect reply ends with its leases' holders (an array).
  const bool has_holders = (script == ScriptId::kSharedInspect ||
                            script == ScriptId::kSemInspect) &&
                           v.elements.size() > 3 &&
                           v.elements.back().type == RedisValue::Type::kArray;
  const size_t fields = v.elements.size() - (has_record || has_holders ? 1 : 0);
  if (fields < 3 || fields > max_fields) return badShape(node, script);
  for (size_t i = 0; i < fields; ++i) {
    const RedisValue& e = v.elements[i];
    if (e.type != RedisValue::Type::kInteger || e.integer < -2) return badShape(node, script);
  }
  const int64_t code = v.elements[0].integer;
  const int64_t token = v.elements[1].integer;
  const int64_t ttl = v.elements[2].integer;
  const int64_t count = fields >= 4 ? v.elements[3].integer : 0;
  const int64_t limit = fields >= 5 ? v.elements[4].integer : 0;
  if (count < 0 || limit < 0) return badShape(node, script);
  Outcome o;
  if (has_record && !parseHolderRecord(v.elements.back().str, &o)) {
    return badShape(node, script);
  }
  if (has_holders && !parseLeaseHolders(v.elements.back(), &o)) return badShape(node, script);
  const bool acquires = script == ScriptId::kAcquire || script == ScriptId::kSemAcquire ||
                        script == ScriptId::kSharedAcquire || script == ScriptId::kFairAcquire;
  if (semaphore || shared) {
    o.used = count;
    o.limit = limit;
  } else {
    o.holds = count;
  }
  switch (code) {
    case 1:
      o.code = OutcomeCode::kOk;
      // A grant always carries its token (and a mutex grant its holds); a hand-off without a
      // token only gave back a hold.
      if (acquires && token <= 0) return badShape(node, script);
      if ((script == ScriptId::kAcquire || script == ScriptId::kFairAcquire) && o.holds < 1) {
        return badShape(node, script);
      }
      if (script == ScriptId::kReleaseGrant && token <= 0 && o.holds < 1) {
        return badShape(node, script);
      }
      o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
      // PTTL -1 (no expiry: not a key of ours) reads as 0 left.
      o.validity_ms = std::max<int64_t>(0, ttl);
      return o;
    case 0:
      if (script == ScriptId::kInspect || script == ScriptId::kForceRelease ||
          script == ScriptId::kTokenSync || script == ScriptId::kElectionSync ||
          script == ScriptId::kFairWithdraw || script == ScriptId::kWriterWithdraw ||
          (semaphore && script != ScriptId::kSemAcquire) ||
          (shared && script != ScriptId::kSharedAcquire)) {
        return badShape(node, script);
      }
      o.code = acquires ? OutcomeCode::kBusy : OutcomeCode::kNotOwner;
      if (script == ScriptId::kAcquire) {  // its 4th field: the writers marked themselves
        o.writer_marked = o.holds == 1;
        o.holds = 0;
      }
      // PTTL -1: a key without expiry (not ours); unknown, so waiters fall back to their backoff.
      o.holder_ttl_ms = ttl >= 0 ? ttl : -1;
      return o;
    case -1:
      o.code = OutcomeCode::kNotHeld;
      o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
      return o;
    case 2:
      if (script != ScriptId::kSemAcquire) return badShape(node, script);
      o.code = OutcomeCode::kLimitMismatch;
      return o;
    case 5:
      if (script != ScriptId::kAcquire && script != ScriptId::kFairAcquire &&
          script != ScriptId::kSharedAcquire) {
        return badShape(node, script);
      }
      o.code = OutcomeCode::kBusy;
      o.busy_reason = BusyReason::kLockDelay;
      o.holder_ttl_ms = std::max<int64_t>(1, ttl);
      return o;
    case 3:
    case 4:
      if (script != ScriptId::kAcquire && script != ScriptId::kSharedAcquire &&
          script != ScriptId::kFairAcquire) {
        return badShape(node, script);
      }
      if (code == 4 && script != ScriptId::kSharedAcquire) return badShape(node, script);
      o.code = OutcomeCode::kBusy;
      o.busy_reason = code == 3 ? BusyReason::kHeldByYou : BusyReason::kWriterWaiting;
      o.holder_ttl_ms = ttl >= 0 ? ttl : -1;
      return o;
    default:
      return badShape(node, script);
  }
}

StatusOr<AllOutcome> decodeAllOutcome(const StatusOr<RedisValue>& reply, size_t names,
                                      std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return scriptErrorStatus(node, v.str);
  const Status bad = badShape(node, ScriptId::kAcquireAll);
  if (v.type != RedisValue::Type::kArray || v.elements.size() < 3) return bad;
  for (const RedisValue& e : v.elements) {
    if (e.type != RedisValue::Type::kInteger) return bad;
  }
  AllOutcome o;
  if (v.elements[0].integer == 1) {
    if (v.elements.size() != 3 + names) return bad;
    o.granted = true;
    o.validity_ms = std::max<int64_t>(0, v.elements[2].integer);
    for (size_t i = 3; i < v.elements.size(); ++i) {
      if (v.elements[i].integer <= 0) return bad;
      o.tokens.push_back(static_cast<uint64_t>(v.elements[i].integer));
    }
    return o;
  }
  if (v.elements[0].integer != 0 || v.elements.size() != 4 || v.elements[3].integer < 1 ||
      static_cast<size_t>(v.elements[3].integer) > names) {
    return bad;
  }
  o.holder_ttl_ms = v.elements[2].integer >= 0 ? v.elements[2].integer : -1;
  o.busy_index = static_cast<size_t>(v.elements[3].integer - 1);
  return o;
}

ScriptCall::Views ScriptCall::views() const {
  Views v;
  for (size_t i = 0; i < key_count; ++i) v.keys[i] = keys[i];
  for (size_t i = 0; i < arg_count; ++i) v.args[i] = args[i];
  v.key_count = key_count;
  v.arg_count = arg_count;
  return v;
}

namespace {

// The script of each verb of each kind; an empty cell is a pair no script serves, which
// scriptFor() refuses. A new kind or verb gets its row or column here (and nowhere else in this
// file but the keys and ARGV of scriptCallFor()).
using ScriptTable = std::array<std::array<std::optional<ScriptId>, kVerbCount>, kLockKindCount>;
constexpr ScriptTable kScript = [] {
  ScriptTable t{};
  auto serve = [&t](LockKind kind, Verb verb, ScriptId script) {
    t[static_cast<size_t>(kind)][static_cast<size_t>(verb)] = script;
  };
  // A fair lock is a mutex granted through a queue: its acquire and withdraw work on the queue,
  // its other verbs are the mutex's (the same lease). A mutex force release frees readers too:
  // they hold the mutex's key. A mutex withdraw is a queued writer's: it removes its mark.
  for (LockKind kind : {LockKind::kMutex, LockKind::kFair}) {
    serve(kind, Verb::kRelease, ScriptId::kRelease);
    serve(kind, Verb::kExtend, ScriptId::kExtend);
    serve(kind, Verb::kInspect, ScriptId::kInspect);
    serve(kind, Verb::kHandOff, ScriptId::kReleaseGrant);
    serve(kind, Verb::kForceRelease, ScriptId::kForceRelease);
  }
  serve(LockKind::kMutex, Verb::kAcquire, ScriptId::kAcquire);
  serve(LockKind::kMutex, Verb::kWithdraw, ScriptId::kWriterWithdraw);
  serve(LockKind::kFair, Verb::kAcquire, ScriptId::kFairAcquire);
  serve(LockKind::kFair, Verb::kWithdraw, ScriptId::kFairWithdraw);
  // Permits and readers are never handed on nor force-released, and have no queue to leave.
  serve(LockKind::kSemaphore, Verb::kAcquire, ScriptId::kSemAcquire);
  serve(LockKind::kSemaphore, Verb::kRelease, ScriptId::kSemRelease);
  serve(LockKind::kSemaphore, Verb::kExtend, ScriptId::kSemExtend);
  serve(LockKind::kSemaphore, Verb::kInspect, ScriptId::kSemInspect);
  serve(LockKind::kShared, Verb::kAcquire, ScriptId::kSharedAcquire);
  serve(LockKind::kShared, Verb::kRelease, ScriptId::kSharedRelease);
  serve(LockKind::kShared, Verb::kExtend, ScriptId::kSharedExtend);
  serve(LockKind::kShared, Verb::kInspect, ScriptId::kSharedInspect);
  // An election is a mutex under keys of its own whose lease records who leads: renew and resign
  // are the mutex's extend and release (which keep and delete the record, KEYS[3]). It is never
  // handed on, force-released or queued in Redis (src/lock/kinds/election.cc).
  serve(LockKind::kElection, Verb::kAcquire, ScriptId::kElectionCampaign);
  serve(LockKind::kElection, Verb::kExtend, ScriptId::kExtend);
  serve(LockKind::kElection, Verb::kRelease, ScriptId::kRelease);
  serve(LockKind::kElection, Verb::kInspect, ScriptId::kElectionLeader);
  serve(LockKind::kElection, Verb::kProclaim, ScriptId::kElectionProclaim);
  return t;
}();

}  // namespace

StatusOr<ScriptId> scriptFor(LockKind kind, Verb verb) {
  const size_t k = static_cast<size_t>(kind);
  const size_t v = static_cast<size_t>(verb);
  if (k < kLockKindCount && v < kVerbCount && kScript[k][v]) return *kScript[k][v];
  return Status(StatusCode::kFailedPrecondition,
                std::string(verbName(verb)) + " is not served for " + lockKindName(kind) +
                    " locks: no Redis script for the pair (src/redis/scripts.cc, kScript)");
}

StatusOr<ScriptCall> scriptCallFor(const Operation& op, const ScriptContext& ctx) {
  StatusOr<ScriptId> script = scriptFor(op.kind, op.verb);
  if (!script.isOk()) return script.status();
  ScriptCall c;
  c.script = *script;
  auto key = [&c](std::string k) { c.keys[c.key_count++] = std::move(k); };
  auto arg = [&c](std::string_view a) { c.args[c.arg_count++].assign(a); };
  // What a script needs to announce a change of the lock: channel, reason (the message's
  // payload, backend::announcement: what changed)[, "sharded"].
  auto announceArgs = [&](std::string_view reason) {
    arg(releaseChannel(ctx.prefix, op.name));
    arg(reason);
    if (ctx.sharded_publish) arg(kShardedPublish);
  };
  // KEYS: each script's file (src/redis/lua/<name>.lua) states them.
  if (op.kind == LockKind::kSemaphore) {
    key(semaphoreKey(ctx.prefix, op.name));
    key(semaphoreTokenKey(ctx.prefix, op.name));
    key(semaphoreLimitKey(ctx.prefix, op.name));
    key(permitHoldersKey(ctx.prefix, op.name));  // the permits' holders
  } else if (op.kind == LockKind::kElection) {
    key(electionKey(ctx.prefix, op.name));
    key(electionTokenKey(ctx.prefix, op.name));
    key(electionLeaderKey(ctx.prefix, op.name));  // (elections have no lock-delay)
  } else {
    key(lockKey(ctx.prefix, op.name));
    key(tokenKey(ctx.prefix, op.name));
    switch (c.script) {
      case ScriptId::kSharedAcquire:
        key(readersKey(ctx.prefix, op.name));
        key(writerMarkKey(ctx.prefix, op.name));
        key(readerHoldersKey(ctx.prefix, op.name));
        break;
      case ScriptId::kSharedRelease:
      case ScriptId::kSharedExtend:
        key(readersKey(ctx.prefix, op.name));
        key(readerHoldersKey(ctx.prefix, op.name));
        break;
      case ScriptId::kSharedInspect:
        key(readersKey(ctx.prefix, op.name));
        key(holderRecordKey(ctx.prefix, op.name));  // a writer's
        key(readerHoldersKey(ctx.prefix, op.name));
        if (ctx.grant_records) key(grantRecordKey(ctx.prefix, op.name));
        break;
      case ScriptId::kFairAcquire:
      case ScriptId::kFairWithdraw:
        key(fairQueueKey(ctx.prefix, op.name));
        key(fairClaimsKey(ctx.prefix, op.name));
        if (c.script == ScriptId::kFairAcquire) key(holderRecordKey(ctx.prefix, op.name));
        break;
      case ScriptId::kInspect:
        key(holderRecordKey(ctx.prefix, op.name));
        if (ctx.grant_records) key(grantRecordKey(ctx.prefix, op.name));
        break;
      case ScriptId::kRelease:
      case ScriptId::kExtend:
      case ScriptId::kReleaseGrant:
        key(holderRecordKey(ctx.prefix, op.name));  // the holder record follows the lease
        // The grant record outlives a lease renewed past the counter's TTL, as the counter does.
        if (c.script == ScriptId::kExtend && ctx.grant_records) {
          key(grantRecordKey(ctx.prefix, op.name));
        }
        break;
      case ScriptId::kWriterWithdraw:
        key(writerMarkKey(ctx.prefix, op.name));  // the queued writers' marks
        break;
      case ScriptId::kAcquire:
        if (op.writer_wait_ms > 0) key(writerMarkKey(ctx.prefix, op.name));
        if (ctx.grant_records) key(grantRecordKey(ctx.prefix, op.name));
        key(holderRecordKey(ctx.prefix, op.name));  // always the last key but the delay
        break;
      default:
        break;
    }
    // The lock-delay key goes last (src/redis/lua/lib/lock_delay.lua): always where a grant is
    // decided or a lease of anybody's is deleted; for extend, release and hand-off only when the
    // lease may have one (or the next owner asks for one), so that a lease without a delay never
    // names a key that does not exist (TRYAGAIN while its Cluster slot migrates).
    switch (c.script) {
      case ScriptId::kAcquire:
      case ScriptId::kFairAcquire:
      case ScriptId::kSharedAcquire:  // readers wait out a writer's delay too
      case ScriptId::kForceRelease:
        key(lockDelayKey(ctx.prefix, op.name));
        break;
      case ScriptId::kExtend:
      case ScriptId::kRelease:
        if (op.lease_may_delay) key(lockDelayKey(ctx.prefix, op.name));
        break;
      case ScriptId::kReleaseGrant:
        if (op.lease_may_delay || op.lock_delay_ms > 0) key(lockDelayKey(ctx.prefix, op.name));
        break;
      default:
        break;
    }
  }
  // ARGV, and the metric op.
  switch (op.verb) {
    case Verb::kAcquire:
      c.node_op = NodeOp::kAcquire;
      arg(op.owner);
      arg(std::to_string(op.ttl_ms));
      if (op.kind == LockKind::kSemaphore) arg(std::to_string(op.limit));
      arg(grantCounterArg(ctx));
      if (c.script == ScriptId::kFairAcquire) {
        arg(std::to_string(std::max<int64_t>(0, op.claim_ms)));
        arg(op.holder);
        arg(op.also_waiting);
        arg(std::to_string(std::max<int64_t>(0, op.lock_delay_ms)));
        announceArgs(announcement::kGranted);  // a grant is news to every event stream
      } else if (c.script == ScriptId::kAcquire) {
        arg(op.holder);
        arg(op.reentrant ? kReentrantArg : kNotReentrantArg);
        arg(std::to_string(std::max<int64_t>(0, op.writer_wait_ms)));
        arg(std::to_string(std::max<int64_t>(0, op.lock_delay_ms)));
        announceArgs(announcement::kGranted);
      } else if (c.script == ScriptId::kSharedAcquire || c.script == ScriptId::kSemAcquire) {
        arg(op.holder);  // the reader's / permit's label (lib/lease_labels.lua)
        // The first reader of a free lock is news to every event stream (semaphores have none).
        if (c.script == ScriptId::kSharedAcquire) announceArgs(announcement::kGranted);
      } else if (c.script == ScriptId::kElectionCampaign) {
        arg(op.candidate);
        arg(op.value);
        announceArgs(announcement::kGranted);  // a new leader is news to every observer
      }
      break;
    case Verb::kRelease: {
      c.node_op = NodeOp::kRelease;
      arg(op.owner);
      announceArgs(announcement::kReleased);
      // Only release.lua checks a token (the permits' and readers' scripts have none per lease).
      const bool token_limited = op.only_token != 0 && c.script == ScriptId::kRelease;
      if (op.involuntary || token_limited) {
        if (!ctx.sharded_publish) arg(kNotReentrantArg);  // "-": not sharded
        arg(op.involuntary ? kInvoluntaryArg : kNotReentrantArg);
      }
      if (token_limited) arg(std::to_string(op.only_token));
      break;
    }
    case Verb::kExtend:
      c.node_op = NodeOp::kExtend;
      arg(op.owner);
      arg(std::to_string(op.ttl_ms));
      arg(ctx.counter_ttl_ms);
      if (c.script == ScriptId::kExtend && op.kind != LockKind::kElection) {
        arg(kHolderFollowsLeaseArg);
        if (ctx.grant_records) arg(kGrantRecordArg);
      }
      break;
    case Verb::kInspect:
      c.node_op = NodeOp::kInspect;
      if (c.script == ScriptId::kSharedInspect || c.script == ScriptId::kSemInspect) {
        arg(std::to_string(kMaxListedHolders));
      }
      break;
    case Verb::kHandOff:
      c.node_op = NodeOp::kRelease;
      arg(op.owner);
      arg(op.next_owner);
      arg(std::to_string(op.ttl_ms));
      arg(grantCounterArg(ctx));
      arg(op.holder);  // the next owner's label
      arg(std::to_string(std::max<int64_t>(0, op.lock_delay_ms)));
      announceArgs(announcement::kGranted);  // never a release: the lock was not free
      break;
    case Verb::kWithdraw:
      c.node_op = NodeOp::kRelease;
      arg(op.owner);
      if (c.script == ScriptId::kWriterWithdraw) {
        arg(std::to_string(std::max<int64_t>(1, op.writer_wait_ms)));
        arg(op.also_waiting);
      }
      announceArgs(announcement::kReleased);  // a withdrawn waiter may have let others in
      break;
    case Verb::kForceRelease:
      c.node_op = NodeOp::kRelease;
      announceArgs(announcement::kForced);
      break;
    case Verb::kProclaim:
      c.node_op = NodeOp::kOther;
      arg(op.owner);
      arg(op.value);
      announceArgs(announcement::kProclaimed);
      break;
  }
  return c;
}

ScriptCall tokenSyncCall(std::string_view name, std::string_view owner, uint64_t token,
                         const ScriptContext& ctx) {
  ScriptCall c;
  c.script = ScriptId::kTokenSync;
  c.node_op = NodeOp::kOther;
  c.keys[0] = tokenKey(ctx.prefix, name);
  c.keys[1] = lockKey(ctx.prefix, name);
  c.keys[2] = grantRecordKey(ctx.prefix, name);
  c.key_count = 3;
  c.args[0] = std::to_string(token);
  c.args[1] = ctx.counter_ttl_ms;
  c.args[2].assign(owner);
  c.arg_count = 3;
  return c;
}

ScriptCall rollbackCall(std::string_view name, std::string_view owner, uint64_t node_token,
                        uint64_t synced_token, const ScriptContext& ctx) {
  ScriptCall c;
  c.script = ScriptId::kRollback;
  c.node_op = NodeOp::kRelease;
  // The lock-delay key last (lib/lock_delay.lua): the attempt's own, if it asked for one.
  for (std::string key : {lockKey(ctx.prefix, name), holderRecordKey(ctx.prefix, name),
                          grantRecordKey(ctx.prefix, name), lockDelayKey(ctx.prefix, name)}) {
    c.keys[c.key_count++] = std::move(key);
  }
  for (std::string arg :
       {std::string(owner), std::to_string(node_token), std::to_string(synced_token),
        releaseChannel(ctx.prefix, name), std::string(announcement::kRolledBack)}) {
    c.args[c.arg_count++] = std::move(arg);
  }
  if (ctx.sharded_publish) c.args[c.arg_count++].assign(kShardedPublish);
  return c;
}

ScriptCall electionSyncCall(std::string_view name, std::string_view owner, uint64_t term,
                            int64_t since_ms, const ScriptContext& ctx) {
  ScriptCall c;
  c.script = ScriptId::kElectionSync;
  c.node_op = NodeOp::kOther;
  c.keys[0] = electionKey(ctx.prefix, name);
  c.keys[1] = electionTokenKey(ctx.prefix, name);
  c.keys[2] = electionLeaderKey(ctx.prefix, name);
  c.key_count = 3;
  c.args[0].assign(owner);
  c.args[1] = std::to_string(term);
  c.args[2] = std::to_string(since_ms);
  c.args[3] = ctx.counter_ttl_ms;
  c.args[4] = releaseChannel(ctx.prefix, name);
  c.args[5].assign(announcement::kGranted);  // a leader made whole on this node
  c.arg_count = 6;
  return c;
}

}  // namespace sidelock::backend
