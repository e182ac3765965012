#include "cli/run_options.h"

#include <sys/stat.h>

#include <charconv>
#include <cstdlib>

#include "cli/exit_codes.h"

namespace sidelock::cli {
namespace {

constexpr int64_t kMaxDurationMs = int64_t{100} * 365 * 24 * 3600 * 1000;

/// For options that take a value: "--ttl 500" or "--ttl=500".
bool takeValue(const std::vector<std::string>& args, size_t* i, std::string_view flag,
               std::optional<std::string>* value, Status* error) {
  const std::string& arg = args[*i];
  if (arg == flag) {
    if (*i + 1 >= args.size()) {
      *error = invalidArgument(std::string(flag) + " needs a value");
      return true;
    }
    *value = args[++*i];
    return true;
  }
  if (arg.size() > flag.size() && arg.compare(0, flag.size(), flag) == 0 &&
      arg[flag.size()] == '=') {
    *value = arg.substr(flag.size() + 1);
    return true;
  }
  return false;
}

}  // namespace

std::string RunOptions::endpoint() const {
  if (!socket_path.empty()) return "unix:" + socket_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

RunEnvironment RunEnvironment::system() {
  RunEnvironment env;
  env.getenv = [](const char* name) -> std::optional<std::string> {
    const char* v = ::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  env.socket_exists = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  return env;
}

StatusOr<int64_t> parseDurationMs(std::string_view text) {
  if (text.empty()) return invalidArgument("empty duration");
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || value < 0) {
    return invalidArgument("'" + std::string(text) + "' is not a duration (e.g. 500, 500ms, 30s)");
  }
  std::string_view unit(end, text.data() + text.size() - end);
  int64_t scale = 0;
  if (unit.empty() || unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else {
    return invalidArgument("'" + std::string(text) + "': unknown unit (use ms, s, m or h)");
  }
  if (value > kMaxDurationMs / scale) {
    return invalidArgument("'" + std::string(text) + "' is too long");
  }
  return value * scale;
}

Status parseHostPort(std::string_view text, std::string* host, int* port) {
  std::string_view h;
  std::string_view p;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalidArgument("'" + std::string(text) + "' is not [IPV6]:PORT");
    }
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return invalidArgument("'" + std::string(text) + "' is not HOST:PORT");
    }
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) {
      return invalidArgument("'" + std::string(text) + "': write IPv6 addresses as [ADDR]:PORT");
    }
  }
  int value = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (h.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() || value < 1 ||
      value > 65535) {
    return invalidArgument("'" + std::string(text) + "' is not HOST:PORT (port 1-65535)");
  }
  *host = std::string(h);
  *port = value;
  return Status::ok();
}

StatusOr<RunOptions> parseRunArgs(const std::vector<std::string>& args, const RunEnvironment& env) {
  RunOptions opts;
  std::optional<std::string> socket_flag;
  std::optional<std::string> addr_flag;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {  // "-- NAME CMD" is not the syntax, but "--" before NAME ends options
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // NAME
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
    if (takeValue(args, &i, "--socket", &socket_flag, &error) ||
        takeValue(args, &i, "--addr", &addr_flag, &error)) {
      if (!error.isOk()) return error;
      continue;
    }
    struct DurationFlag {
      const char* flag;
      std::optional<int64_t>* target;
      bool allow_zero;
    };
    std::optional<int64_t> grace;
    const DurationFlag durations[] = {{"--ttl", &opts.ttl_ms, false},
                                      {"--wait", &opts.wait_ms, true},
                                      {"--max-hold", &opts.max_hold_ms, false},
                                      {"--grace", &grace, true}};
    bool matched = false;
    for (const DurationFlag& d : durations) {
      if (!takeValue(args, &i, d.flag, &value, &error)) continue;
      if (!error.isOk()) return error;
      StatusOr<int64_t> ms = parseDurationMs(*value);
      if (!ms.isOk()) return invalidArgument(std::string(d.flag) + ": " + ms.status().message());
      if (!d.allow_zero && *ms == 0) return invalidArgument(std::string(d.flag) + " must be > 0");
      *d.target = *ms;
      matched = true;
      break;
    }
    if (grace) opts.grace_ms = *grace;
    if (!matched) return invalidArgument("unknown option '" + arg + "'");
  }

  if (i >= args.size()) return invalidArgument("missing lock NAME");
  opts.name = args[i++];
  if (opts.name.empty()) return invalidArgument("the lock NAME must not be empty");
  if (i < args.size() && args[i] == "--") ++i;
  if (i >= args.size()) return invalidArgument("missing CMD to run (NAME -- CMD [ARGS...])");
  opts.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (socket_flag && addr_flag) return invalidArgument("give either --socket or --addr, not both");
  if (socket_flag && socket_flag->empty()) return invalidArgument("--socket needs a path");
  // Flags win over the environment, which wins over the defaults.
  if (!socket_flag && !addr_flag) {
    if (auto s = env.getenv("SIDELOCK_SOCKET")) {
      socket_flag = *s;
    } else if (auto a = env.getenv("SIDELOCK_ADDR")) {
      addr_flag = *a;
    } else if (env.socket_exists(kDefaultSocketPath)) {
      socket_flag = kDefaultSocketPath;
    } else {
      addr_flag = kDefaultAddr;
    }
  }
  // From the environment only: a flag would show the token in `ps`.
  if (auto t = env.getenv("SIDELOCK_AUTH_TOKEN")) opts.token = *t;
  if (socket_flag) {
    opts.socket_path = *socket_flag;
  } else {
    Status s = parseHostPort(*addr_flag, &opts.host, &opts.port);
    if (!s.isOk()) return invalidArgument("address: " + s.message());
  }
  return opts;
}

std::string runUsage() {
  return std::string(
             "Usage: sidelock run [OPTIONS] NAME [--] CMD [ARGS...]\n"
             "\n"
             "Acquires the lock NAME through the local sidecar, runs CMD while holding it, and\n"
             "releases it when CMD exits. The lock is bound to this process's connection to the\n"
             "sidecar (hold: stream): it is renewed while CMD runs and freed if sidelock run "
             "dies.\n"
             "CMD gets SIDELOCK_LOCK, SIDELOCK_OWNER and SIDELOCK_TOKEN (the fencing token) in "
             "its\n"
             "environment, runs in its own process group, and receives SIGINT, SIGTERM, SIGHUP,\n"
             "SIGQUIT, SIGUSR1 and SIGUSR2 sent to sidelock run. If the lock is lost, CMD's "
             "process\n"
             "group gets SIGTERM at once and SIGKILL after the grace period.\n"
             "\n"
             "Options:\n"
             "  --socket PATH    sidecar Unix socket (env SIDELOCK_SOCKET; default:\n"
             "                   ") +
         kDefaultSocketPath + " if it exists, else --addr " + kDefaultAddr +
         ")\n"
         "  --addr HOST:PORT sidecar TCP address (env SIDELOCK_ADDR)\n"
         "  (env SIDELOCK_AUTH_TOKEN: bearer token when the sidecar has auth.tokens)\n"
         "  --ttl MS         lease TTL (default: the sidecar's locks.default_ttl_ms)\n"
         "  --wait MS        how long to wait for the lock; 0 = try once (default: forever)\n"
         "  --max-hold MS    stop CMD after holding the lock this long (default: the sidecar's\n"
         "                   locks.default_max_hold_ms)\n"
         "  --grace MS       SIGTERM -> SIGKILL delay when the lock is lost (default 10000)\n"
         "  -q, --quiet      no diagnostics on stderr (the exit status still tells)\n"
         "  -h, --help       this text\n"
         "Durations take an optional unit: 500, 500ms, 30s, 5m, 2h.\n"
         "\n" +
         exitCodeTable();
}

}  // namespace sidelock::cli
