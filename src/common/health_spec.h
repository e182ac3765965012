// What a health-bound hold names (README "Holds that follow the app's health"): the app's health
// endpoint, how often to probe it and how many failures in a row end the hold, and the limits the
// operator puts on probes. Here, below both, because the API checks the "health" of requests and
// the configuration checks the `health` of the elections it runs for its pod (`elections[]`) and
// the `health` limits against the very same rules; src/health probes what they name.
//
// Only plain http:// to a loopback address is accepted: the sidecar must never be made to send
// requests anywhere else (no DNS, no redirects, no userinfo).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sidelock {

/// A validated loopback http URL, ready to connect to.
struct LoopbackUrl {
  std::string text;    // the URL as given (the key probes are shared by)
  std::string host;    // the Host header: "127.0.0.1:8080", "[::1]:8080", "localhost:8080"
  std::string target;  // the request target: path and query, "/" if none
  int port = 80;
  sockaddr_storage address{};  // 127.0.0.0/8 or ::1, with the port
};

/// Longest URL accepted.
inline constexpr size_t kMaxLoopbackUrlBytes = 1024;

/// Parses `text`: "http://" (any case), a host that is an IPv4 address in 127.0.0.0/8 (dotted
/// decimal, four parts), "[::1]" or "localhost" (read as 127.0.0.1, never resolved), an optional
/// port 1..65535 (default 80), then an optional path and query of printable ASCII (no spaces).
/// A fragment, userinfo ("user@host"), any other host or scheme is refused with
/// kInvalidArgument and a message that names `field` ("health.url", "elections[0].health.url")
/// and says why.
StatusOr<LoopbackUrl> parseLoopbackUrl(std::string_view text, std::string_view field);

/// How a hold is bound to its app's health.
struct HealthSpec {
  LoopbackUrl url;
  int64_t interval_ms = 1000;
  int failures = 3;
  /// Failed probes in the first grace_ms of a watch do not count (an app still starting up, as a
  /// Kubernetes startupProbe allows); the probes run and are counted in the metrics all the same.
  int64_t grace_ms = 0;
};

inline constexpr int64_t kMinHealthIntervalMs = 100;
inline constexpr int64_t kMaxHealthIntervalMs = 60000;
inline constexpr int kMaxHealthFailures = 100;
inline constexpr int64_t kMaxHealthGraceMs = 600000;

inline constexpr size_t kDefaultMaxHealthProbes = 64;
inline constexpr size_t kMaxHealthProbesLimit = 100000;

/// What the operator allows probes to do (config `health`): a token holder may otherwise learn
/// which local ports answer 2xx, or start a probe per URL it can think of.
struct HealthLimits {
  /// Ports a health URL may name; empty: any.
  std::vector<int> allowed_ports;
  /// Distinct probes (one per URL and interval) running at once; a hold that would start one
  /// more is refused.
  size_t max_probes = kDefaultMaxHealthProbes;
};

/// What is wrong with the port `url` names under `limits` ("" if nothing), naming `field`.
std::string healthPortProblem(const LoopbackUrl& url, const HealthLimits& limits,
                              std::string_view field);

}  // namespace sidelock
