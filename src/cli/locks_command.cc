#include "cli/locks_command.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "cli/acquire_stream.h"
#include "cli/exit_codes.h"

namespace sidelock::cli {
namespace {

constexpr int64_t kConnectTimeoutMs = 5'000;
constexpr int64_t kAnswerTimeoutMs = 10'000;
// 100k leases list as ~10 MB of JSON; far beyond that something is wrong.
constexpr size_t kMaxListBytes = 256 * 1024 * 1024;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// "850ms", "12.5s", "3m20s", "2h05m".
std::string humanMs(int64_t ms) {
  char buf[32];
  if (ms < 1000) {
    snprintf(buf, sizeof(buf), "%" PRId64 "ms", ms);
  } else if (ms < 60'000) {
    snprintf(buf, sizeof(buf), "%.1fs", static_cast<double>(ms) / 1000.0);
  } else if (ms < 3'600'000) {
    snprintf(buf, sizeof(buf), "%" PRId64 "m%02" PRId64 "s", ms / 60'000, (ms / 1000) % 60);
  } else {
    snprintf(buf, sizeof(buf), "%" PRId64 "h%02" PRId64 "m", ms / 3'600'000, (ms / 60'000) % 60);
  }
  return buf;
}

struct Row {
  bool held = false;
  uint64_t token = 0;
  int64_t age_ms = 0;
  int64_t ttl_ms = 0;
  std::string renewal = "-";
  int64_t waiters = 0;
};

/// The rows as left-aligned columns two spaces apart, one line each.
std::string renderColumns(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  }
  std::string out;
  for (const auto& line : cells) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c) {
      text += line[c];
      if (c + 1 < line.size()) text.append(width[c] - line[c].size() + 2, ' ');
    }
    out += text + "\n";
  }
  return out;
}

bool isCount(const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }

}  // namespace

StatusOr<LocksOptions> parseLocksArgs(const std::vector<std::string>& args,
                                      const RunEnvironment& env) {
  LocksOptions opts;
  std::optional<std::string> socket_flag;
  std::optional<std::string> addr_flag;
  std::optional<std::string> prefix_flag;
  std::optional<std::string> limit_flag;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      LocksOptions help;
      help.help = true;
      return help;
    }
    if (arg == "--json") {
      opts.json = true;
      continue;
    }
    if (arg == "--all") {
      opts.all = true;
      continue;
    }
    Status error;
    if (takeFlagValue(args, &i, "--socket", &socket_flag, &error) ||
        takeFlagValue(args, &i, "--addr", &addr_flag, &error) ||
        takeFlagValue(args, &i, "--prefix", &prefix_flag, &error) ||
        takeFlagValue(args, &i, "--limit", &limit_flag, &error)) {
      if (!error.isOk()) return error;
      continue;
    }
    // Worded as sidelock's and sidelock run's own usage errors.
    return invalidArgument((arg.starts_with("-") ? "unknown option '" : "unexpected argument '") +
                           arg + "'");
  }
  if ((prefix_flag || limit_flag) && !opts.all) {
    return invalidArgument("--prefix and --limit go with --all");
  }
  if (prefix_flag) {
    opts.prefix = *prefix_flag;
    for (char ch : opts.prefix) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) &&
          std::string_view("-_.:@~").find(ch) == std::string_view::npos) {
        return invalidArgument("--prefix: lock-name characters only (A-Z a-z 0-9 -_.:@~)");
      }
    }
  }
  if (limit_flag) {
    const std::string& t = *limit_flag;
    if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(t) < 1 || std::stoll(t) > 1000) {
      return invalidArgument("--limit: an integer 1..1000");
    }
    opts.limit = std::stoll(t);
  }
  StatusOr<SidecarEndpoint> endpoint = resolveEndpoint(socket_flag, addr_flag, env);
  if (!endpoint.isOk()) return endpoint.status();
  opts.endpoint = *endpoint;
  if (auto t = env.getenv("SIDELOCK_AUTH_TOKEN")) opts.token = *t;
  return opts;
}

StatusOr<std::string> formatLocksTable(const nlohmann::json& list) {
  auto bad = [](const std::string& what) {
    return Status(StatusCode::kInternal, "unexpected answer from the sidecar: " + what);
  };
  if (!list.is_object() || !list.contains("leases") || !list["leases"].is_array() ||
      !list.contains("waiters") || !list["waiters"].is_array()) {
    return bad("no \"leases\" and \"waiters\" arrays");
  }
  std::map<std::string, Row> rows;
  int64_t total_waiters = 0;
  for (const auto& l : list["leases"]) {
    if (!l.is_object() || !l.contains("name") || !l["name"].is_string() || !l.contains("token") ||
        !l["token"].is_number_unsigned() || !isCount(l.value("age_ms", -1)) ||
        !isCount(l.value("ttl_remaining_ms", -1))) {
      return bad("a lease without name, token, age_ms or ttl_remaining_ms");
    }
    Row& row = rows[l["name"].get<std::string>()];
    row.held = true;
    row.token = l["token"].get<uint64_t>();
    row.age_ms = l["age_ms"].get<int64_t>();
    row.ttl_ms = l["ttl_remaining_ms"].get<int64_t>();
    if (l.value("stream", false)) {
      row.renewal = "stream";
    } else if (l.value("auto_renew", false)) {
      row.renewal = "auto";
    } else {
      row.renewal = "none";
    }
  }
  for (const auto& w : list["waiters"]) {
    if (!w.is_object() || !w.contains("name") || !w["name"].is_string() ||
        !isCount(w.value("waiters", -1))) {
      return bad("a waiter entry without name or waiters");
    }
    rows[w["name"].get<std::string>()].waiters += w["waiters"].get<int64_t>();
    total_waiters += w["waiters"].get<int64_t>();
  }

  std::vector<std::vector<std::string>> cells = {
      {"LOCK", "HELD", "TOKEN", "AGE", "TTL LEFT", "RENEWAL", "WAITERS"}};
  size_t held = 0;
  for (const auto& [name, row] : rows) {
    held += row.held ? 1 : 0;
    cells.push_back({name, row.held ? "yes" : "no", row.held ? std::to_string(row.token) : "-",
                     row.held ? humanMs(row.age_ms) : "-", row.held ? humanMs(row.ttl_ms) : "-",
                     row.held ? row.renewal : "-", std::to_string(row.waiters)});
  }
  if (rows.empty()) return std::string("no leases held and no waiters queued in this sidecar\n");
  std::string out = renderColumns(cells);
  out += std::to_string(held) + (held == 1 ? " lease" : " leases") + " held, " +
         std::to_string(total_waiters) + (total_waiters == 1 ? " waiter" : " waiters") +
         " queued (this sidecar only; owner ids are never shown)\n";
  return out;
}

std::string locksRequestPath(const LocksOptions& opts) {
  if (!opts.all) return "/v1/locks";
  std::string path = "/admin/v1/locks";
  std::string query;
  if (!opts.prefix.empty()) query += "prefix=" + opts.prefix;  // lock-name characters: no escaping
  if (opts.limit > 0) query += (query.empty() ? "" : "&") + ("limit=" + std::to_string(opts.limit));
  return query.empty() ? path : path + "?" + query;
}

StatusOr<std::string> formatHeldTable(const nlohmann::json& listing, int64_t now_unix_ms) {
  auto bad = [](const std::string& what) {
    return Status(StatusCode::kInternal, "unexpected answer from the sidecar: " + what);
  };
  if (!listing.is_object() || !listing.contains("locks") || !listing["locks"].is_array() ||
      !listing.contains("truncated") || !listing["truncated"].is_boolean()) {
    return bad("no \"locks\" array and \"truncated\" flag");
  }
  std::vector<std::vector<std::string>> cells = {{"LOCK", "HOLDER", "SINCE", "TTL LEFT", "TOKEN"}};
  for (const auto& l : listing["locks"]) {
    if (!l.is_object() || !l.contains("name") || !l["name"].is_string() || !l.contains("holder") ||
        !l["holder"].is_string() || !isCount(l.value("since_ms", -1)) ||
        !isCount(l.value("ttl_ms", -1)) || !l.contains("token") ||
        !l["token"].is_number_unsigned()) {
      return bad("a lock without name, holder, since_ms, ttl_ms or token");
    }
    const int64_t age = std::max<int64_t>(0, now_unix_ms - l["since_ms"].get<int64_t>());
    cells.push_back({l["name"].get<std::string>(), l["holder"].get<std::string>(),
                     humanMs(age) + " ago", humanMs(l["ttl_ms"].get<int64_t>()),
                     std::to_string(l["token"].get<uint64_t>())});
  }
  std::string out;
  const size_t n = cells.size() - 1;
  if (n == 0) {
    out = "no held locks found\n";
  } else {
    out = renderColumns(cells);
    out += std::to_string(n) + (n == 1 ? " lock" : " locks") +
           " held across the deployment (owner ids are never shown)\n";
  }
  if (listing["truncated"].get<bool>()) {
    out += "truncated: " + listing.value("truncated_reason", std::string("(no reason given)")) +
           "\n";
  }
  return out;
}

std::string locksUsage() {
  return std::string(
             "Usage: sidelock locks [--socket PATH | --addr HOST:PORT] [--json]\n"
             "       sidelock locks --all [--prefix P] [--limit N] [--addr ADMIN_HOST:PORT] "
             "[--json]\n"
             "\n"
             "Shows the leases a sidecar holds and the waiters queued in it (GET /v1/locks):\n"
             "lock, fencing token, age, remaining TTL, renewal (none, auto, stream) and waiters.\n"
             "Owner ids are never shown. Other sidecars' leases on the same Redis are not listed.\n"
             "\n"
             "Options:\n") +
         endpointUsage() +
         "  --json           print the sidecar's JSON answer instead of a table\n"
         "  --all            held locks across the whole deployment, from the backend\n"
         "                   (GET /admin/v1/locks on the admin listener, listen.admin):\n"
         "                   lock, holder, since, TTL left, token; SIDELOCK_AUTH_TOKEN is then\n"
         "                   an admin token when the admin listener has admin tokens\n"
         "  --prefix P       with --all: only lock names starting with P\n"
         "  --limit N        with --all: at most N locks (1..1000, default 100)\n"
         "  -h, --help       this text\n"
         "\n"
         "Exit status: 0 shown; 64 bad arguments; 69 sidecar unreachable, no answer or 5xx;\n"
         "70 malformed answer; 77 refused (401/403/421: token or Host).\n";
}

int locksCommand(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  StatusOr<LocksOptions> opts = parseLocksArgs(args, RunEnvironment::system());
  if (!opts.isOk()) {
    fprintf(stderr, "sidelock locks: %s\n(sidelock locks --help)\n",
            opts.status().message().c_str());
    return kExitUsage;
  }
  if (opts->help) {
    fputs(locksUsage().c_str(), stdout);
    return 0;
  }
  const std::string where = opts->endpoint.describe();
  StatusOr<Fd> sock = connectSidecar(opts->endpoint, kConnectTimeoutMs);
  if (!sock.isOk()) {
    fprintf(stderr, "sidelock locks: cannot reach the sidecar at %s: %s\n", where.c_str(),
            sock.status().message().c_str());
    return kExitUnavailable;
  }
  const std::string request =
      "GET " + locksRequestPath(*opts) + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: sidelock-locks\r\n"
      "Accept: application/json\r\nConnection: close\r\n" +
      (opts->token.empty() ? std::string() : "Authorization: Bearer " + opts->token + "\r\n") +
      "\r\n";
  AcquireResponseParser parser(kMaxListBytes);
  const int64_t deadline = nowMs() + kAnswerTimeoutMs;
  size_t sent = 0;
  char buf[64 * 1024];
  Status st;
  while (!parser.messageComplete()) {
    const int64_t left = deadline - nowMs();
    pollfd p{sock->get(), static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    const int r = left > 0 ? poll(&p, 1, static_cast<int>(left)) : 0;
    if (r == 0) {
      fprintf(stderr, "sidelock locks: the sidecar at %s did not answer within %lld ms\n",
              where.c_str(), static_cast<long long>(kAnswerTimeoutMs));
      return kExitUnavailable;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "sidelock locks: poll: %s\n", strerror(errno));
      return kExitInternal;
    }
    if (sent < request.size() && (p.revents & POLLOUT)) {
      const ssize_t n =
          send(sock->get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    if (!(p.revents & (POLLIN | POLLERR | POLLHUP))) continue;
    const ssize_t n = recv(sock->get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    st = n > 0 ? parser.feed(std::string_view(buf, static_cast<size_t>(n))) : parser.finish();
    if (n < 0) st = unavailable(strerror(errno));
    if (!st.isOk()) {
      const bool cut = st.code() == StatusCode::kUnavailable;
      fprintf(stderr, "sidelock locks: %s from the sidecar at %s: %s\n",
              cut ? "no answer" : "bad answer", where.c_str(), st.message().c_str());
      return cut ? kExitUnavailable : kExitInternal;
    }
    if (n == 0) break;
  }
  const int status = parser.status();
  if (status != 200) {
    ErrorBody err = parseErrorBody(parser.body());
    fprintf(stderr, "sidelock locks: the sidecar at %s answered %d %s%s%s\n", where.c_str(), status,
            err.error.c_str(), err.message.empty() ? "" : ": ", err.message.c_str());
    if (status == 401 || status == 403 || status == 421) return kExitNotPermitted;
    return status >= 500 ? kExitUnavailable : kExitInternal;
  }
  nlohmann::json list = nlohmann::json::parse(parser.body(), nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded()) {
    fprintf(stderr, "sidelock locks: the sidecar at %s answered with malformed JSON\n",
            where.c_str());
    return kExitInternal;
  }
  if (opts->json) {
    fputs((list.dump() + "\n").c_str(), stdout);
    return 0;
  }
  StatusOr<std::string> table =
      opts->all ? formatHeldTable(list, std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count())
                : formatLocksTable(list);
  if (!table.isOk()) {
    fprintf(stderr, "sidelock locks: %s\n", table.status().message().c_str());
    return kExitInternal;
  }
  fputs(table->c_str(), stdout);
  return 0;
}

}  // namespace sidelock::cli
