#include "cli/run_options.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "cli/exit_codes.h"
#include "common/duration.h"
#include "common/pod_identity.h"

namespace sidelock::cli {

namespace {

/// Whether `text` is valid UTF-8, as nlohmann's JSON printer judges it: printing it with bad
/// bytes dropped and with them replaced gives the same text only when there are none.
bool isUtf8(const std::string& text) {
  const nlohmann::json j = text;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore) ==
         j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string RunOptions::endpoint() const {
  return SidecarEndpoint{socket_path, host, port}.describe();
}

StatusOr<RunOptions> parseRunArgs(const std::vector<std::string>& args, const RunEnvironment& env) {
  RunOptions opts;
  std::optional<std::string> socket_flag;
  std::optional<std::string> addr_flag;
  std::optional<std::string> elect_flag;
  std::optional<std::string> candidate_flag;
  // Options may come before or after NAME: CMD starts at the first word after NAME that is not
  // an option, or after "--". ("-- NAME [--] CMD" works too: a "--" before NAME ends options.)
  bool have_name = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      if (!have_name && i < args.size()) {
        opts.name = args[i++];
        have_name = true;
        if (i < args.size() && args[i] == "--") ++i;
      }
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") {
      if (have_name) break;  // CMD
      opts.name = arg;
      have_name = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      RunOptions help;
      help.help = true;
      return help;
    }
    if (arg == "-q" || arg == "--quiet") {
      opts.quiet = true;
      continue;
    }
    Status error;
    std::optional<std::string> value;
    if (takeFlagValue(args, &i, "--socket", &socket_flag, &error) ||
        takeFlagValue(args, &i, "--addr", &addr_flag, &error) ||
        takeFlagValue(args, &i, "--candidate", &candidate_flag, &error) ||
        takeFlagValue(args, &i, "--value", &opts.value, &error) ||
        takeFlagValue(args, &i, "--health", &opts.health_url, &error)) {
      if (!error.isOk()) return error;
      continue;
    }
    if (takeFlagValue(args, &i, "--elect", &elect_flag, &error)) {
      if (!error.isOk()) return error;
      // --elect NAME is the name: CMD starts at the next word that is no option.
      if (have_name && !opts.elect) {
        return invalidArgument("--elect NAME names the election; give no lock NAME besides (got '" +
                               opts.name + "')");
      }
      if (opts.elect) return invalidArgument("--elect given twice");
      opts.elect = true;
      opts.name = *elect_flag;
      have_name = true;
      continue;
    }
    struct DurationFlag {
      const char* flag;
      std::optional<int64_t>* target;
      bool allow_zero;
    };
    std::optional<int64_t> grace;
    std::optional<int64_t> health_grace;
    const DurationFlag durations[] = {{"--ttl", &opts.ttl_ms, false},
                                      {"--wait", &opts.wait_ms, true},
                                      {"--max-hold", &opts.max_hold_ms, false},
                                      {"--grace", &grace, true},
                                      {"--health-grace", &health_grace, true}};
    bool matched = false;
    for (const DurationFlag& d : durations) {
      if (!takeFlagValue(args, &i, d.flag, &value, &error)) continue;
      if (!error.isOk()) return error;
      StatusOr<int64_t> ms = parseDurationMs(*value);
      if (!ms.isOk()) return invalidArgument(std::string(d.flag) + ": " + ms.status().message());
      if (!d.allow_zero && *ms == 0) return invalidArgument(std::string(d.flag) + " must be > 0");
      *d.target = *ms;
      matched = true;
      break;
    }
    if (grace) opts.grace_ms = *grace;
    if (health_grace) opts.health_grace_ms = *health_grace;
    if (!matched) {
      return invalidArgument("unknown option '" + arg + "'" +
                             (have_name ? " (a CMD that starts with '-' goes after --)" : ""));
    }
  }

  if (!have_name) return invalidArgument("missing lock NAME (or --elect NAME)");
  if (opts.name.empty()) {
    return invalidArgument(opts.elect ? "the election NAME must not be empty"
                                      : "the lock NAME must not be empty");
  }
  if (i >= args.size()) return invalidArgument("missing CMD to run (NAME -- CMD [ARGS...])");
  opts.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (!opts.elect && (candidate_flag || opts.value)) {
    return invalidArgument(std::string(candidate_flag ? "--candidate" : "--value") +
                           " applies to --elect only");
  }
  if (opts.elect) {
    // A leader leads for as long as it lives: a campaign has no cap.
    if (opts.max_hold_ms) return invalidArgument("--max-hold does not apply to --elect");
    // A campaign has no try-once at the sidecar: a candidate waits in line until elected.
    if (opts.wait_ms && *opts.wait_ms == 0) {
      return invalidArgument(
          "--wait 0 does not apply to --elect (a candidate waits in line; "
          "for try-once use a lock: sidelock run --wait 0 NAME)");
    }
    // Who campaigns, as the sidecar names its own pod: $POD_NAME, else the host name.
    opts.candidate = candidate_flag ? *candidate_flag : podIdentity(env.getenv, env.host_name);
    if (opts.candidate.empty()) {
      return invalidArgument(candidate_flag ? "--candidate must not be empty"
                                            : "no candidate: give --candidate ID (default "
                                              "$POD_NAME, else the host name: neither is set)");
    }
  }

  // Sent as JSON strings: bytes that are not UTF-8 would be altered on the way (or refused by the
  // sidecar far from their cause), so they are refused here, naming the option.
  const std::pair<const char*, const std::optional<std::string>*> texts[] = {
      {"--candidate", &candidate_flag}, {"--value", &opts.value}, {"--health", &opts.health_url}};
  for (const auto& [flag, text] : texts) {
    if (*text && !isUtf8(**text)) return invalidArgument(std::string(flag) + " is not valid UTF-8");
  }
  if (opts.elect && !candidate_flag && !isUtf8(opts.candidate)) {
    return invalidArgument("the candidate ($POD_NAME or the host name) is not valid UTF-8");
  }

  StatusOr<SidecarEndpoint> endpoint = resolveEndpoint(socket_flag, addr_flag, env);
  if (!endpoint.isOk()) return endpoint.status();
  opts.socket_path = endpoint->socket_path;
  opts.host = endpoint->host;
  opts.port = endpoint->port;
  // From the environment only: a flag would show the token in `ps`.
  if (auto t = env.getenv("SIDELOCK_AUTH_TOKEN")) opts.token = *t;
  return opts;
}

std::string runUsage() {
  return std::string(
             "Usage: sidelock run [OPTIONS] NAME [--] CMD [ARGS...]\n"
             "       sidelock run [OPTIONS] --elect NAME [--candidate ID] [--value V] [--] CMD "
             "[ARGS...]\n"
             "\n"
             "Acquires the lock NAME through the local sidecar, runs CMD while holding it, and\n"
             "releases it when CMD exits. The lock is bound to a connection to the sidecar (hold:\n"
             "stream) that CMD and its children inherit: it is renewed while any of them runs and\n"
             "freed when the last is gone. When CMD exits, what it left in its process group gets\n"
             "SIGKILL; if sidelock run is killed, a keeper process SIGKILLs CMD's group.\n"
             "CMD gets SIDELOCK_LOCK, SIDELOCK_OWNER and SIDELOCK_TOKEN (the fencing token) in "
             "its\n"
             "environment, runs in its own process group, and receives SIGINT, SIGTERM, SIGHUP,\n"
             "SIGQUIT, SIGUSR1 and SIGUSR2 sent to sidelock run. If the lock is lost, CMD's "
             "process\n"
             "group gets SIGTERM at once and SIGKILL after the grace period -- but never later\n"
             "than the kill deadline: the last renewal received + TTL - a safety margin (a tenth\n"
             "of the TTL, at most 1 s), so nothing of CMD runs once the lease could have expired.\n"
             "Without a renewal for half the TTL (or once only the grace is left before the\n"
             "deadline, if later), CMD gets SIGTERM too. When the sidecar shuts down it steps\n"
             "down (event stepping_down, with release_in_ms: half its shutdown.grace_ms): CMD\n"
             "gets SIGTERM at once and SIGKILL before that release (less the safety margin);\n"
             "the lock is released when CMD is gone, so the next holder never runs beside it.\n"
             "\n"
             "With --elect NAME, sidelock run campaigns in election NAME instead (waiting in line\n"
             "for as long as --wait allows) and runs CMD only while it leads: CMD gets\n"
             "SIDELOCK_ELECTION, SIDELOCK_CANDIDATE, SIDELOCK_TERM (the term, the election's\n"
             "fencing token; also as SIDELOCK_TOKEN) and SIDELOCK_OWNER (for proclaim). Losing\n"
             "the leadership stops CMD as losing a lock does. When CMD exits, or sidelock run "
             "gets\n"
             "SIGTERM or SIGINT (passed on to CMD, SIGKILL after the grace), it resigns.\n"
             "When the sidecar itself shuts down it steps down (event stepping_down, with\n"
             "resign_in_ms: half its shutdown.grace_ms): CMD gets SIGTERM at once and SIGKILL\n"
             "after the grace but before that resignation (less the safety margin), then\n"
             "sidelock run resigns and exits 76 (leadership lost); the next leader is elected\n"
             "once CMD is gone.\n"
             "\n"
             "Options:\n") +
         endpointUsage() +
         "  --ttl MS         lease TTL (default: the sidecar's locks.default_ttl_ms)\n"
         "  --wait MS        how long to wait for the lock (or to be elected); 0 = try once\n"
         "                   (default: forever)\n"
         "  --max-hold MS    stop CMD after holding the lock this long (default: the sidecar's\n"
         "                   locks.max_hold_ms_limit, the cap of a stream hold; not with --elect)\n"
         "  --grace MS       SIGTERM -> SIGKILL delay when CMD must stop (default 10000)\n"
         "  --health URL     the app's health endpoint (http://127.0.0.1:PORT/PATH): after 3\n"
         "                   failed probes a second apart the sidecar stops renewing and CMD is\n"
         "                   stopped as for a lost lock (--elect: lost leadership); the lease\n"
         "                   runs out after CMD's kill deadline\n"
         "  --health-grace MS  failed probes this long after the grant do not count: CMD's\n"
         "                   start-up time (default 30000; at most 600000)\n"
         "  --elect NAME     campaign in election NAME; run CMD only while leading\n"
         "  --candidate ID   who campaigns (default: $POD_NAME, else the host name)\n"
         "  --value V        the leader's value, e.g. its address (default: none)\n"
         "  -q, --quiet      no diagnostics on stderr (the exit status still tells)\n"
         "  -h, --help       this text\n"
         "Options may come before or after NAME; CMD starts at the first word after NAME that\n"
         "is not an option, or after --. Durations take an optional unit: 500, 500ms, 30s, 5m, "
         "2h.\n"
         "\n" +
         exitCodeTable();
}

}  // namespace sidelock::cli
