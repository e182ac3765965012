// `sidelock locks` end to end: the real binary as the CLI, a real sidecar on a real redis-server,
// over TCP and the Unix socket, with and without tokens.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"
#include "support/sidelock_cli.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

CliResult locks(const std::string& args, const std::string& env = "") {
  return runSidelockCli("locks", args, env);
}

TEST(CliLocksTest, ListsLeasesAndWaitersAsATableOrJsonOverTcpAndUnix) {
  RedisServer redis;
  SidecarProcess sidecar(SidecarProcess::Options{redisBackendYaml(redis.address()), {}, true});
  const std::string addr = "--addr 127.0.0.1:" + std::to_string(sidecar.port());

  auto empty = locks(addr);
  EXPECT_EQ(empty.exit_code, 0) << empty.out;
  EXPECT_NE(empty.out.find("no leases held"), std::string::npos) << empty.out;

  HttpClient c = HttpClient::tcp(sidecar.port());
  auto held = c.post("/v1/locks/orders-42/acquire", R"({"ttl_ms":60000,"auto_renew":true})");
  ASSERT_EQ(held.status, 200) << held.body;
  const std::string owner = json::parse(held.body)["owner"];
  const std::string token = std::to_string(json::parse(held.body)["token"].get<uint64_t>());
  const int port = sidecar.port();
  auto waiter = std::async(std::launch::async, [port] {
    HttpClient w = HttpClient::tcp(port);
    return w.request("POST", "/v1/locks/orders-42/acquire", R"({"wait_ms":20000})", 25'000);
  });
  ASSERT_TRUE(
      pollUntil([&] { return locks(addr).out.find("1 waiter queued") != std::string::npos; }));

  for (const std::string& where : {addr, "--socket " + sidecar.socketPath()}) {
    auto table = locks(where);
    EXPECT_EQ(table.exit_code, 0) << table.out;
    EXPECT_NE(table.out.find("LOCK"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("orders-42"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find(token), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("auto"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("1 lease held, 1 waiter queued"), std::string::npos) << table.out;
    EXPECT_EQ(table.out.find(owner), std::string::npos) << "never the owner id";

    auto as_json = locks(where + " --json");
    ASSERT_EQ(as_json.exit_code, 0) << as_json.out;
    const json list = json::parse(as_json.out);
    ASSERT_EQ(list["leases"].size(), 1u);
    EXPECT_EQ(list["leases"][0]["name"], "orders-42");
    ASSERT_EQ(list["waiters"].size(), 1u);
    EXPECT_EQ(list["waiters"][0]["waiters"], 1);
  }
  // The environment chooses the sidecar when no flag does.
  auto from_env = locks("", "SIDELOCK_ADDR=127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(from_env.exit_code, 0) << from_env.out;
  EXPECT_NE(from_env.out.find("orders-42"), std::string::npos) << from_env.out;

  ASSERT_EQ(c.post("/v1/locks/orders-42/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(waiter.get().status, 200);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(CliLocksTest, ExitCodesForUsageUnreachableAndRefused) {
  auto usage = locks("--bogus");
  EXPECT_EQ(usage.exit_code, 64) << usage.out;
  EXPECT_NE(usage.out.find("unknown option"), std::string::npos) << usage.out;
  auto help = locks("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Usage: sidelock locks"), std::string::npos) << help.out;
  auto unreachable = locks("--addr 127.0.0.1:" + std::to_string(pickFreePort()));
  EXPECT_EQ(unreachable.exit_code, 69) << unreachable.out;
  EXPECT_NE(unreachable.out.find("cannot reach the sidecar"), std::string::npos);

  const std::string dir = makeTempDir("sidelock-locks-cli");
  const std::string token = "LocksCliToken-0123456789abcdefghij";
  {
    FILE* f = fopen((dir + "/tokens").c_str(), "w");
    ASSERT_NE(f, nullptr);
    fprintf(f, "%s\n", token.c_str());
    fclose(f);
  }
  RedisServer redis;
  SidecarProcess sidecar(SidecarProcess::Options{
      redisBackendYaml(redis.address()) + "auth:\n  tokens_file: " + dir + "/tokens\n", {}, true});
  const std::string addr = "--addr 127.0.0.1:" + std::to_string(sidecar.port());
  auto refused = locks(addr);
  EXPECT_EQ(refused.exit_code, 77) << refused.out;
  EXPECT_NE(refused.out.find("token_required"), std::string::npos) << refused.out;
  auto wrong = locks(addr, "SIDELOCK_AUTH_TOKEN=WrongToken-0123456789abcdefghij");
  EXPECT_EQ(wrong.exit_code, 77) << wrong.out;
  auto ok = locks(addr, "SIDELOCK_AUTH_TOKEN=" + token);
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
  removeTree(dir);
}

}  // namespace
}  // namespace sidelock::testing
