// The URL of an app's health endpoint, as a hold names it (README "Holds that follow the app's
// health"). Only plain http:// to a loopback address is accepted: the sidecar must never be made
// to send requests anywhere else (no DNS, no redirects, no userinfo).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sidelock::health {

/// A validated loopback http URL, ready to connect to.
struct ProbeUrl {
  std::string text;    // the URL as given (the key probes are shared by)
  std::string host;    // the Host header: "127.0.0.1:8080", "[::1]:8080", "localhost:8080"
  std::string target;  // the request target: path and query, "/" if none
  sockaddr_storage address{};  // 127.0.0.0/8 or ::1, with the port
};

/// Longest URL accepted.
inline constexpr size_t kMaxProbeUrlBytes = 1024;

/// Parses `text`: "http://" (any case), a host that is an IPv4 address in 127.0.0.0/8 (dotted
/// decimal, four parts), "[::1]" or "localhost" (read as 127.0.0.1, never resolved), an optional
/// port 1..65535 (default 80), then an optional path and query of printable ASCII (no spaces).
/// A fragment, userinfo ("user@host"), any other host or scheme is refused with
/// kInvalidArgument and a message saying why.
StatusOr<ProbeUrl> parseProbeUrl(std::string_view text);

}  // namespace sidelock::health
