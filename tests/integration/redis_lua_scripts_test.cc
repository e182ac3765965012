// The Lua scripts as Redis sees them: every script compiles (SCRIPT LOAD on a real redis-server),
// so a syntax error fails here rather than at a sidecar's first EVALSHA; and the table compiled
// into the binary is the directory (src/redis/lua/*.lua), every piece in lib/ used by a script.
// What the scripts do is checked against the memory backend by differential_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

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

}  // namespace
}  // namespace sidelock::backend
