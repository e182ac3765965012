#include <gtest/gtest.h>

#include <map>

#include "cli/command_line.h"
#include "cli/exit_codes.h"
#include "cli/run_options.h"
#include "common/duration.h"

namespace sidelock::cli {
namespace {

RunEnvironment fakeEnv(std::map<std::string, std::string> vars = {}, bool socket_exists = false) {
  RunEnvironment env;
  env.getenv = [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  env.socket_exists = [socket_exists](const std::string& path) {
    return socket_exists && path == kDefaultSocketPath;
  };
  return env;
}

StatusOr<RunOptions> parse(std::vector<std::string> args, const RunEnvironment& env = fakeEnv()) {
  return parseRunArgs(args, env);
}

struct UsageCase {
  std::vector<std::string> args;
  std::string expect_in_message;
};

/// Each case is refused as a usage error whose message names the problem.
void expectUsageErrors(const std::vector<UsageCase>& cases, const RunEnvironment& env = fakeEnv()) {
  for (const UsageCase& c : cases) {
    auto opts = parse(c.args, env);
    ASSERT_FALSE(opts.isOk()) << ::testing::PrintToString(c.args);
    EXPECT_EQ(opts.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(opts.status().message().find(c.expect_in_message), std::string::npos)
        << opts.status().message();
  }
}

TEST(RunOptionsTest, MinimalCommandUsesDefaults) {
  auto opts = parse({"job", "--", "sh", "-c", "true"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->name, "job");
  EXPECT_EQ(opts->command, (std::vector<std::string>{"sh", "-c", "true"}));
  EXPECT_EQ(opts->host, "127.0.0.1");
  EXPECT_EQ(opts->port, 7411);
  EXPECT_TRUE(opts->socket_path.empty());
  EXPECT_FALSE(opts->ttl_ms);
  EXPECT_FALSE(opts->wait_ms);
  EXPECT_FALSE(opts->max_hold_ms);
  EXPECT_EQ(opts->grace_ms, kDefaultGraceMs);
  EXPECT_FALSE(opts->quiet);
  EXPECT_FALSE(opts->help);
}

TEST(RunOptionsTest, DoubleDashIsOptionalAndCommandArgsAreNotOptions) {
  auto opts = parse({"job", "ls", "--ttl", "5"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->command, (std::vector<std::string>{"ls", "--ttl", "5"}));
  EXPECT_FALSE(opts->ttl_ms);
  // Only the first "--" after NAME is ours.
  opts = parse({"job", "--", "--", "x"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->command, (std::vector<std::string>{"--", "x"}));
}

TEST(RunOptionsTest, OptionsMayFollowTheName) {
  // Used to take the lock and then run "--ttl" as the command.
  auto opts = parse({"foo", "--ttl", "5s", "--", "true"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->name, "foo");
  EXPECT_EQ(*opts->ttl_ms, 5000);
  EXPECT_EQ(opts->command, (std::vector<std::string>{"true"}));
  // Without "--", CMD starts at the first word that is not an option; its own options are its.
  opts = parse({"--addr", "h:1", "foo", "--wait=0", "-q", "sh", "-c", "x", "--ttl", "1"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(*opts->wait_ms, 0);
  EXPECT_TRUE(opts->quiet);
  EXPECT_FALSE(opts->ttl_ms);
  EXPECT_EQ(opts->command, (std::vector<std::string>{"sh", "-c", "x", "--ttl", "1"}));
  // "--" before NAME still ends the options.
  opts = parse({"--", "-name-", "--", "-cmd"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->name, "-name-");
  EXPECT_EQ(opts->command, (std::vector<std::string>{"-cmd"}));
  // Help after the name too.
  opts = parse({"foo", "--help"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_TRUE(opts->help);
}

TEST(RunOptionsTest, AllOptionsBothSpellings) {
  auto opts =
      parse({"--socket", "/tmp/s.sock", "--ttl=1500", "--wait", "2s", "--max-hold", "1h",
             "--grace=0", "-q", "--health", "http://127.0.0.1:8080/ready", "--health-grace", "45s",
             "job", "--", "cmd"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->socket_path, "/tmp/s.sock");
  EXPECT_EQ(*opts->ttl_ms, 1500);
  EXPECT_EQ(*opts->wait_ms, 2000);
  EXPECT_EQ(*opts->max_hold_ms, 3'600'000);
  EXPECT_EQ(opts->grace_ms, 0);
  EXPECT_TRUE(opts->quiet);
  EXPECT_EQ(*opts->health_url, "http://127.0.0.1:8080/ready");
  EXPECT_EQ(opts->health_grace_ms, 45'000);
  EXPECT_EQ(opts->endpoint(), "unix:/tmp/s.sock");
  // --elect takes --health too: the leader resigns when the app fails.
  auto elect = parse({"--elect", "e", "--health", "http://127.0.0.1:8080/ready", "cmd"},
                     fakeEnv({{"POD_NAME", "p"}}));
  ASSERT_TRUE(elect.isOk()) << elect.status().toString();
  EXPECT_EQ(*elect->health_url, "http://127.0.0.1:8080/ready");
}

TEST(RunOptionsTest, WaitZeroMeansTryOnce) {
  auto opts = parse({"--wait", "0", "job", "--", "cmd"});
  ASSERT_TRUE(opts.isOk());
  ASSERT_TRUE(opts->wait_ms);
  EXPECT_EQ(*opts->wait_ms, 0);
}

TEST(RunOptionsTest, AddrForms) {
  auto opts = parse({"--addr", "localhost:9000", "j", "c"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->host, "localhost");
  EXPECT_EQ(opts->port, 9000);
  opts = parse({"--addr=[::1]:7411", "j", "c"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->host, "::1");
  EXPECT_EQ(opts->endpoint(), "[::1]:7411");
  for (const char* bad : {"localhost", "localhost:", ":80", "h:0", "h:65536", "h:80x", "::1:80",
                          "[::1]80", "[::1]"}) {
    EXPECT_FALSE(parse({"--addr", bad, "j", "c"}).isOk()) << bad;
  }
}

TEST(RunOptionsTest, EndpointPrecedence) {
  // Environment over defaults.
  auto opts = parse({"j", "c"}, fakeEnv({{"SIDELOCK_SOCKET", "/x.sock"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->socket_path, "/x.sock");
  opts = parse({"j", "c"}, fakeEnv({{"SIDELOCK_ADDR", "10.0.0.1:1234"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->host, "10.0.0.1");
  EXPECT_EQ(opts->port, 1234);
  // SIDELOCK_SOCKET wins over SIDELOCK_ADDR.
  opts = parse({"j", "c"}, fakeEnv({{"SIDELOCK_SOCKET", "/x.sock"}, {"SIDELOCK_ADDR", "h:1"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->socket_path, "/x.sock");
  // Flags over environment.
  opts = parse({"--addr", "h:2", "j", "c"}, fakeEnv({{"SIDELOCK_SOCKET", "/x.sock"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_TRUE(opts->socket_path.empty());
  EXPECT_EQ(opts->port, 2);
  // Default socket if it exists, else default TCP address.
  opts = parse({"j", "c"}, fakeEnv({}, /*socket_exists=*/true));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->socket_path, kDefaultSocketPath);
  // A bad SIDELOCK_ADDR is reported.
  EXPECT_FALSE(parse({"j", "c"}, fakeEnv({{"SIDELOCK_ADDR", "nonsense"}})).isOk());
}

TEST(RunOptionsTest, BearerTokenComesFromTheEnvironmentOnly) {
  auto opts = parse({"j", "c"}, fakeEnv({{"SIDELOCK_AUTH_TOKEN", "t0ken-from-env-0123"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->token, "t0ken-from-env-0123");
  opts = parse({"j", "c"}, fakeEnv({{"SIDELOCK_TOKEN", "42"}}));
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->token, "")
      << "SIDELOCK_TOKEN is the fencing token handed to CMD, not a credential";
}

TEST(RunOptionsTest, HelpWinsAnywhereBeforeCmd) {
  auto opts = parse({"--ttl", "5", "--help"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_TRUE(opts->help);
  opts = parse({"-h"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_TRUE(opts->help);
}

TEST(RunOptionsTest, UsageErrorsHaveClearMessages) {
  expectUsageErrors({
      {{}, "missing lock NAME"},
      {{"job"}, "missing CMD"},
      {{"job", "--"}, "missing CMD"},
      {{"--ttl"}, "--ttl needs a value"},
      {{"--ttl", "0", "j", "c"}, "--ttl must be > 0"},
      {{"--ttl", "-5", "j", "c"}, "not a duration"},
      {{"--ttl", "5x", "j", "c"}, "unknown unit"},
      {{"--wait", "", "j", "c"}, "empty duration"},
      {{"--max-hold", "0", "j", "c"}, "--max-hold must be > 0"},
      {{"--bogus", "j", "c"}, "unknown option '--bogus'"},
      {{"j", "-c", "x"}, "a CMD that starts with '-' goes after --"},
      {{"j", "--ttl", "0", "c"}, "--ttl must be > 0"},
      {{"j", "--ttl"}, "--ttl needs a value"},
      {{"--socket", "/a", "--addr", "h:1", "j", "c"}, "not both"},
      {{"--socket=", "j", "c"}, "--socket needs a path"},
      {{"", "c"}, "must not be empty"},
      {{"--ttl", "99999999999999999999", "j", "c"}, "not a duration"},
      {{"--ttl", "999999999h", "j", "c"}, "too long"},
  });
}

TEST(RunOptionsTest, ElectNamesTheElectionAndTakesCandidateAndValue) {
  auto opts = parse({"--elect", "scheduler", "--candidate", "pod-a", "--value", "10.0.0.7:8080",
                     "--ttl", "10s", "--grace", "2s", "--", "./run"});
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_TRUE(opts->elect);
  EXPECT_EQ(opts->name, "scheduler");
  EXPECT_EQ(opts->candidate, "pod-a");
  EXPECT_EQ(opts->value, "10.0.0.7:8080");
  EXPECT_EQ(*opts->ttl_ms, 10000);
  EXPECT_EQ(opts->grace_ms, 2000);
  EXPECT_FALSE(opts->wait_ms);  // waits in line as long as it takes
  EXPECT_EQ(opts->command, (std::vector<std::string>{"./run"}));

  // --elect NAME is the name: CMD starts at the next word that is no option, options may follow.
  opts = parse({"--elect=cron", "--wait", "5s", "sh", "-c", "x"}, fakeEnv({{"POD_NAME", "p"}}));
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->name, "cron");
  EXPECT_EQ(*opts->wait_ms, 5000);
  EXPECT_FALSE(opts->value);
  EXPECT_EQ(opts->command, (std::vector<std::string>{"sh", "-c", "x"}));

  // Without --elect nothing of it is set.
  opts = parse({"job", "true"});
  ASSERT_TRUE(opts.isOk());
  EXPECT_FALSE(opts->elect);
  EXPECT_TRUE(opts->candidate.empty());
}

TEST(RunOptionsTest, ElectCandidateDefaultsLikeTheSidecarsIdentity) {
  RunEnvironment env = fakeEnv({{"POD_NAME", "web-7f9c"}});
  env.host_name = [] { return std::string("node-1"); };
  auto opts = parse({"--elect", "e", "true"}, env);
  ASSERT_TRUE(opts.isOk()) << opts.status().toString();
  EXPECT_EQ(opts->candidate, "web-7f9c");  // $POD_NAME first
  opts = parse({"--elect", "e", "--candidate", "me", "true"}, env);
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->candidate, "me");  // the flag wins
  env = fakeEnv();
  env.host_name = [] { return std::string("node-1"); };
  opts = parse({"--elect", "e", "true"}, env);
  ASSERT_TRUE(opts.isOk());
  EXPECT_EQ(opts->candidate, "node-1");  // else the host name
  opts = parse({"--elect", "e", "true"}, fakeEnv());
  ASSERT_FALSE(opts.isOk());  // neither: say how to give one
  EXPECT_NE(opts.status().message().find("--candidate"), std::string::npos)
      << opts.status().message();
}

TEST(RunOptionsTest, ElectUsageErrors) {
  expectUsageErrors(
      {
          {{"--elect"}, "--elect needs a value"},
          {{"--elect", "e"}, "missing CMD"},
          {{"--elect", "", "c"}, "the election NAME must not be empty"},
          {{"--elect", "e", "--elect", "f", "c"}, "--elect given twice"},
          {{"job", "--elect", "e", "c"}, "give no lock NAME besides"},
          {{"--candidate", "a", "job", "c"}, "--candidate applies to --elect only"},
          {{"job", "--value", "v", "c"}, "--value applies to --elect only"},
          {{"--elect", "e", "--max-hold", "5s", "c"}, "--max-hold does not apply to --elect"},
          {{"--elect", "e", "--wait", "0", "c"}, "--wait 0 does not apply to --elect"},
          {{"--elect", "e", "--candidate", "", "c"}, "--candidate must not be empty"},
          {{"--elect", "e", "--candidate"}, "--candidate needs a value"},
          // Bytes that are not UTF-8 are refused here (sent as JSON, they once ended the process).
          {{"--elect", "e", "--value", "\xe9", "c"}, "--value is not valid UTF-8"},
          {{"--elect", "e", "--candidate", "a\xff", "c"}, "--candidate is not valid UTF-8"},
          {{"--health", "http://127.0.0.1:1/\xc3", "job", "c"}, "--health is not valid UTF-8"},
      },
      fakeEnv({{"POD_NAME", "p"}}));
}

TEST(RunOptionsTest, DurationUnits) {
  EXPECT_EQ(*parseDurationMs("0"), 0);
  EXPECT_EQ(*parseDurationMs("250"), 250);
  EXPECT_EQ(*parseDurationMs("250ms"), 250);
  EXPECT_EQ(*parseDurationMs("3s"), 3000);
  EXPECT_EQ(*parseDurationMs("2m"), 120'000);
  EXPECT_EQ(*parseDurationMs("1h"), 3'600'000);
  EXPECT_FALSE(parseDurationMs("1.5s").isOk());
  EXPECT_FALSE(parseDurationMs("s").isOk());
  EXPECT_FALSE(parseDurationMs(" 5").isOk());
}

TEST(RunOptionsTest, UsageListsEveryOptionAndExitCode) {
  std::string usage = runUsage();
  for (const char* needle : {"--socket",       "--addr",
                             "--ttl",          "--wait",
                             "--max-hold",     "--grace",
                             "--quiet",        "SIDELOCK_SOCKET",
                             "SIDELOCK_ADDR",  "SIDELOCK_TOKEN",
                             "SIDELOCK_OWNER", "SIDELOCK_LOCK",
                             " 64 ",           " 69 ",
                             " 70 ",           " 75 ",
                             " 76 ",           " 124 ",
                             " 126 ",          " 127 ",
                             "128+N",          "--elect",
                             "--candidate",    "--value",
                             "SIDELOCK_TERM",  "SIDELOCK_ELECTION",
                             "--health",
                             "kill deadline"}) {
    EXPECT_NE(usage.find(needle), std::string::npos) << needle;
  }
}

TEST(CommandLineTest, CommandsAndTheConfigFile) {
  auto line = parseCommandLine({"--config", "/etc/sidelock.yaml"});
  ASSERT_TRUE(line.isOk()) << line.status().toString();
  EXPECT_EQ(line->command, Command::kServe);
  EXPECT_EQ(line->config_path, "/etc/sidelock.yaml");
  line = parseCommandLine({"--check-config=a.yaml"});
  ASSERT_TRUE(line.isOk());
  EXPECT_EQ(line->command, Command::kCheckConfig);
  EXPECT_EQ(line->config_path, "a.yaml");
  EXPECT_EQ(parseCommandLine({"run", "--bogus"})->command, Command::kRun);
  EXPECT_EQ(parseCommandLine({"locks"})->command, Command::kLocks);
  EXPECT_EQ(parseCommandLine({"-V"})->command, Command::kVersion);
  EXPECT_EQ(parseCommandLine({"--help"})->command, Command::kHelp);
}

TEST(CommandLineTest, UsageErrorsSayWhatWasWrong) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--bogus"}, "unknown option --bogus"},
      {{"--config"}, "--config needs a value"},
      {{"--config="}, "--config needs a value"},
      {{"--check-config"}, "--check-config needs a value"},
      {{"--config", "a.yaml", "b.yaml"}, "unexpected argument 'b.yaml'"},
      {{"--version", "x"}, "unexpected argument 'x'"},
      {{"serve"}, "unknown command 'serve'"},
      {{}, "missing --config FILE (or a command)"},
  };
  for (const Case& c : cases) {
    auto line = parseCommandLine(c.args);
    ASSERT_FALSE(line.isOk()) << ::testing::PrintToString(c.args);
    EXPECT_EQ(line.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(line.status().message(), c.message);
  }
}

}  // namespace
}  // namespace sidelock::cli
