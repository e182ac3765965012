#include "common/health_spec.h"

#include <arpa/inet.h>

#include <cstring>

namespace sidelock {
namespace {

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    char y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

Status refuse(std::string_view field, std::string_view why) {
  return invalidArgument(std::string(field) + " " + std::string(why) +
                         " (only http://127.0.0.0/8, http://[::1] or http://localhost)");
}

// "8080" -> 8080; empty or anything but 1..65535 in plain digits -> 0.
int parsePort(std::string_view digits) {
  if (digits.empty() || digits.size() > 5) return 0;
  int port = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return 0;
    port = port * 10 + (c - '0');
  }
  return port <= 65535 ? port : 0;
}

}  // namespace

StatusOr<LoopbackUrl> parseLoopbackUrl(std::string_view text, std::string_view field) {
  if (text.size() > kMaxLoopbackUrlBytes) return refuse(field, "is too long");
  for (char c : text) {
    // Printable ASCII only: no spaces, no control bytes (they could split the request line).
    if (c <= 0x20 || c >= 0x7f) return refuse(field, "must be printable ASCII without spaces");
  }
  constexpr std::string_view kScheme = "http://";
  if (text.size() < kScheme.size() || !equalsIgnoreCase(text.substr(0, kScheme.size()), kScheme)) {
    return refuse(field, "must start with http://");
  }
  std::string_view rest = text.substr(kScheme.size());
  const size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  std::string_view target =
      authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (target.find('#') != std::string_view::npos) return refuse(field, "must not have a fragment");
  // Userinfo ("127.0.0.1@evil.example", "user:pw@host") is refused outright: whichever side a
  // client would take as the host, we never guess.
  if (authority.find('@') != std::string_view::npos)
    return refuse(field, "must not have userinfo (@)");
  if (authority.find('\\') != std::string_view::npos)
    return refuse(field, "must not have a backslash");

  std::string_view host;
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return refuse(field, "has an unclosed [");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return refuse(field, "has text after ]");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
  }
  int port = 80;
  if (has_port) {
    port = parsePort(port_text);
    if (port == 0) return refuse(field, "has a bad port (1..65535)");
  }

  LoopbackUrl url;
  url.port = port;
  url.text = std::string(text);
  url.target = target.empty() ? "/" : std::string(target);
  if (url.target.front() == '?') url.target.insert(0, "/");
  const bool bracketed = !authority.empty() && authority.front() == '[';
  if (bracketed) {
    in6_addr v6{};
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1 ||
        std::memcmp(&v6, &in6addr_loopback, sizeof v6) != 0) {
      return refuse(field, "names an IPv6 host other than [::1]");
    }
    auto* sa = reinterpret_cast<sockaddr_in6*>(&url.address);
    sa->sin6_family = AF_INET6;
    sa->sin6_addr = v6;
    sa->sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    in_addr v4{};
    if (equalsIgnoreCase(host, "localhost")) {
      // Never resolved: /etc/hosts could point it elsewhere.
      v4.s_addr = htonl(INADDR_LOOPBACK);
    } else if (inet_pton(AF_INET, std::string(host).c_str(), &v4) != 1) {
      return refuse(field, "names a host that is not a loopback address");
    }
    if ((ntohl(v4.s_addr) >> 24) != 127) return refuse(field, "names a host outside 127.0.0.0/8");
    auto* sa = reinterpret_cast<sockaddr_in*>(&url.address);
    sa->sin_family = AF_INET;
    sa->sin_addr = v4;
    sa->sin_port = htons(static_cast<uint16_t>(port));
  }
  url.host = std::string(authority);
  return url;
}

std::string healthPortProblem(const LoopbackUrl& url, const HealthLimits& limits,
                              std::string_view field) {
  if (limits.allowed_ports.empty()) return "";
  for (int port : limits.allowed_ports) {
    if (port == url.port) return "";
  }
  std::string allowed;
  for (int port : limits.allowed_ports) {
    allowed += (allowed.empty() ? "" : ", ") + std::to_string(port);
  }
  return std::string(field) + " names port " + std::to_string(url.port) +
         ", which health.allowed_ports does not allow (" + allowed + ")";
}

}  // namespace sidelock
