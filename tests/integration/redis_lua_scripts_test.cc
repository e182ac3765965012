// The Lua scripts as Redis sees them: every script compiles (SCRIPT LOAD on a real redis-server),
// so a syntax error fails here rather than at a sidecar's first EVALSHA; and the table compiled
// into the binary is the directory (src/redis/lua/*.lua), every piece in lib/ used by a script.
// What the scripts do is checked against the memory backend by differential_test.cc; what only
// Redlock runs (rollback.lua) here, on one real server.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "redis/scripts.h"
#include "support/redis_link.h"
#include "support/redis_server.h"

namespace sidelock::backend {
namespace {

namespace fs = std::filesystem;

const fs::path kLuaDir = fs::path(SIDELOCK_SOURCE_DIR) / "src" / "redis" / "lua";

std::set<std::string> luaFiles(const fs::path& dir) {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".lua") names.insert(e.path().stem());
  }
  return names;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(RedisLuaScripts, EveryScriptLoadsIntoRedis) {
  testing::RedisServer redis;
  testing::RedisLink link(redis.port());
  std::set<std::string> shas;
  for (ScriptId id : kAllScripts) {
    try {
      const std::string sha = link.text({"SCRIPT", "LOAD", std::string(scriptText(id))});
      EXPECT_EQ(sha.size(), 40u) << scriptName(id) << ": " << sha;
      shas.insert(sha);
    } catch (const std::runtime_error& e) {
      ADD_FAILURE() << "src/redis/lua/" << scriptName(id) << ".lua does not compile: " << e.what();
    }
  }
  EXPECT_EQ(shas.size(), kScriptCount) << "two scripts with the same text";
  // The check above would catch a script Redis refuses; make sure it would (not a test that
  // passes whatever the text).
  EXPECT_THROW(link.text({"SCRIPT", "LOAD", "return {1, 0"}), std::runtime_error);
}

TEST(RedisLuaScripts, TheTableIsTheDirectory) {
  std::set<std::string> compiled;
  for (size_t i = 0; i < kScriptCount; ++i) {
    EXPECT_EQ(static_cast<size_t>(kAllScripts[i]), i) << "kAllScripts is in index order";
  }
  for (ScriptId id : kAllScripts) {
    compiled.insert(scriptName(id));
    EXPECT_FALSE(scriptText(id).empty()) << scriptName(id);
    // The header (KEYS, ARGV, replies) is for readers: not sent to Redis.
    EXPECT_FALSE(scriptText(id).starts_with("-- ")) << scriptName(id);
    EXPECT_EQ(scriptText(id).find("--!"), std::string_view::npos) << scriptName(id);
  }
  EXPECT_EQ(compiled, luaFiles(kLuaDir))
      << "a .lua file in src/redis/lua is not in the build (re-run cmake?) or the other way round";

  // Every piece of lib/ is included by some script (a piece nobody includes is dead code).
  std::set<std::string> included;
  for (const std::string& name : luaFiles(kLuaDir)) {
    std::istringstream lines(readFile(kLuaDir / (name + ".lua")));
    for (std::string line; std::getline(lines, line) && line.starts_with("--");) {
      static constexpr std::string_view kInclude = "--! include lib/";
      if (line.starts_with(kInclude)) {
        included.insert(fs::path(line.substr(kInclude.size())).stem());
      }
    }
  }
  EXPECT_EQ(included, luaFiles(kLuaDir / "lib"));
}

// The reply shape of each script comes from its file's "--! reply:" line.
TEST(RedisLuaScripts, ReplyShapesComeFromTheFiles) {
  EXPECT_EQ(scriptSource(ScriptId::kSemAcquire).reply, ScriptReply::kSemaphore);
  EXPECT_EQ(scriptSource(ScriptId::kSharedRelease).reply, ScriptReply::kShared);
  EXPECT_EQ(scriptSource(ScriptId::kAcquireAll).reply, ScriptReply::kAcquireAll);
  EXPECT_EQ(scriptSource(ScriptId::kAcquire).reply, ScriptReply::kLock);
  for (ScriptId id : kAllScripts) {
    const std::string file = readFile(kLuaDir / (std::string(scriptName(id)) + ".lua"));
    EXPECT_EQ(isSemaphoreScript(id), file.find("\n--! reply: semaphore\n") != std::string::npos)
        << scriptName(id);
    EXPECT_EQ(isSharedScript(id), file.find("\n--! reply: shared\n") != std::string::npos)
        << scriptName(id);
  }
}

// rollback.lua, Redlock's clean-up of an acquire that was not granted, deletes only the attempt's
// own lease: where the node answered, the owner's lease only while the grant record names one of
// the attempt's tokens (its answer, the synced one); a later grant to the same owner id, recorded
// under a token of its own, is left alone. It announces `rolled_back`, and never touches the
// counter or the grant record (reads answer as before).
TEST(RedisLuaScripts, ARollbackDeletesOnlyTheAttemptsLease) {
  testing::RedisServer redis;
  testing::RedisLink link(redis.port());
  ScriptContext ctx{"p:", "61000", false};
  ctx.grant_records = true;
  auto rollback = [&](uint64_t node_token, uint64_t synced_token) {
    const ScriptCall c = rollbackCall("n", "o", node_token, synced_token, ctx);
    std::vector<std::string> cmd{"EVAL", std::string(scriptText(c.script)),
                                 std::to_string(c.key_count)};
    cmd.insert(cmd.end(), c.keys.begin(), c.keys.begin() + c.key_count);
    cmd.insert(cmd.end(), c.args.begin(), c.args.begin() + c.arg_count);
    return link.command(cmd);
  };
  auto lease = [&](const std::string& owner, const std::string& record) {
    link.text({"SET", "p:{n}", owner, "PX", "30000"});
    link.text({"SET", "p:{n}:holder", "1795376077464 pod", "PX", "30000"});
    link.text({"SET", "p:{n}:granted", record, "PX", "61000"});
    link.text({"SET", "p:{n}:token", "1795376077500"});
  };
  auto reads = [&] {
    return link.text({"GET", "p:{n}"}) + "|" + link.text({"GET", "p:{n}:granted"}) + "|" +
           link.text({"GET", "p:{n}:token"});
  };

  // The same owner id's later grant (token ...500), where the attempt had ...490 (its answer) or
  // ...495 (the synced token): left alone, nothing announced.
  lease("o", "1795376077500 o");
  EXPECT_EQ(rollback(1795376077490, 1795376077495), (std::vector<int64_t>{-1, 0, 0}));
  EXPECT_EQ(reads(), "o|1795376077500 o|1795376077500");
  EXPECT_EQ(link.text({"GET", "p:{n}:holder"}), "1795376077464 pod");
  // Another owner's lease: left alone.
  lease("other", "1795376077500 other");
  EXPECT_EQ(rollback(1795376077500, 0)[0], 0);
  EXPECT_EQ(reads(), "other|1795376077500 other|1795376077500");
  // The attempt's lease, by the node's answer and by the synced token: deleted with its holder
  // record and lock-delay; the counter and the grant record stay (reads are unchanged).
  for (const auto& [node_token, synced_token] : std::vector<std::pair<uint64_t, uint64_t>>{
           {1795376077500, 0}, {1795376077490, 1795376077500}}) {
    lease("o", "1795376077500 o");
    link.text({"SET", "p:{n}:delay", "1000", "PX", "31000"});
    EXPECT_EQ(rollback(node_token, synced_token), (std::vector<int64_t>{1, 0, 0, 0}));
    EXPECT_EQ(reads(), "|1795376077500 o|1795376077500");
    EXPECT_EQ(link.command({"EXISTS", "p:{n}:holder", "p:{n}:delay"}), std::vector<int64_t>{0});
  }
  // No token known (the node never answered the attempt): the owner's lease, as a release.
  lease("o", "1795376077500 o");
  EXPECT_EQ(rollback(0, 0), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(reads(), "|1795376077500 o|1795376077500");
  EXPECT_EQ(rollback(0, 0), (std::vector<int64_t>{-1, 0, 0})) << "nothing left";

  // Announced as a roll-back, on the lock's channel.
  testing::RedisLink subscriber(redis.port());
  EXPECT_EQ(subscriber.output({"SUBSCRIBE", releaseChannel("p:", "n")}),
            "subscribe\n" + releaseChannel("p:", "n") + "\n1");
  lease("o", "1795376077500 o");
  EXPECT_EQ(rollback(1795376077500, 0)[0], 1);
  // RedisLink reads one reply per command: on a subscribed link the first one waiting is the
  // message published meanwhile (the PING's own reply stays unread).
  EXPECT_EQ(subscriber.output({"PING"}), "message\n" + releaseChannel("p:", "n") + "\n" +
                                             std::string(announcement::kRolledBack));
}

}  // namespace
}  // namespace sidelock::backend
