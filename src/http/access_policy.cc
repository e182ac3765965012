#include "http/access_policy.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>

#include "http/http_error.h"

namespace sidelock::http {
namespace {

std::string lowerAscii(std::string_view in) {
  std::string out(in);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::array<unsigned char, 32> sha256(std::string_view data) {
  std::array<unsigned char, 32> digest{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return digest;
}

/// One pass over the bytes, no search and no from_chars per part: every gRPC call checks its
/// :authority ("127.0.0.1:port" from most clients), and the old split-and-parse cost ~380
/// instructions a call. Accepts what it did: four parts split by '.', each 1 to 3 characters that
/// std::from_chars reads whole as an int (so an optional '-' before the digits) of at most 255,
/// the first one 127.
bool isDottedQuadIn127(std::string_view host) {
  const size_t n = host.size();
  size_t i = 0;
  int parts = 0;
  int first = -1;
  for (;;) {
    const size_t start = i;
    const bool negative = i < n && host[i] == '-';
    if (negative) ++i;
    int value = 0;
    const size_t digits_at = i;
    while (i < n && host[i] >= '0' && host[i] <= '9') {
      value = value * 10 + (host[i] - '0');
      if (++i - start > 3) return false;
    }
    if (i == digits_at) return false;               // no digit: empty, "-", or another byte
    if (i < n && host[i] != '.') return false;      // a byte that is not part of the number
    if (!negative && value > 255) return false;
    if (parts == 0) first = negative ? -value : value;
    if (++parts > 4) return false;
    if (i == n) break;
    ++i;  // the '.': a part must follow it
  }
  return parts == 4 && first == 127;
}

/// A 256-entry table of the bytes `chars` names, for the host checks (one load per byte where
/// std::string_view::find_first_not_of searched the set once per byte).
struct ByteSet {
  std::array<bool, 256> has{};
  constexpr explicit ByteSet(std::string_view chars) {
    for (char c : chars) has[static_cast<unsigned char>(c)] = true;
  }
  constexpr bool all(std::string_view text) const {
    for (char c : text) {
      if (!has[static_cast<unsigned char>(c)]) return false;
    }
    return true;
  }
};

// reg-name / IPv4address: unreserved, pct-encoded and sub-delims characters (RFC 3986).
constexpr ByteSet kHostChars(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%!$&'()*+,;=");
// Inside an IP-literal's brackets: the same, and ':'.
constexpr ByteSet kIpLiteralChars(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~%!$&'()*+,;=:");
constexpr ByteSet kDigits("0123456789");

Refusal unauthorized(std::string_view code, std::string message) {
  // RFC 6750 section 3: the challenge names the scheme; invalid_token when one was presented.
  std::string challenge = "Bearer realm=\"sidelock\"";
  if (code == kInvalidToken) challenge += ", error=\"invalid_token\"";
  return Refusal{401, code, std::move(message), {{"WWW-Authenticate", std::move(challenge)}}};
}

/// `text` without leading and trailing spaces and tabs (HTTP's OWS).
std::string_view trimBlanks(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

/// The token of "Authorization: Bearer <token>" (scheme case-insensitive), or "" if none.
std::string_view bearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !equalsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return {};
  }
  return trimBlanks(authorization.substr(kScheme.size()));
}

/// Dapr's "dapr-api-token: <token>" (what Dapr SDKs send for DAPR_API_TOKEN): the bare token,
/// without a scheme; surrounding spaces and tabs (HTTP's optional whitespace) are not part of it.
std::string_view daprApiToken(std::string_view header) { return trimBlanks(header); }

}  // namespace

void TokenVerifier::replace(const std::vector<TokenEntry>& entries) {
  std::vector<Stored> next;
  next.reserve(entries.size());
  for (const auto& e : entries) {
    auto principal = std::make_shared<Principal>();
    principal->label = e.label;
    principal->scopes = e.prefixes;
    next.push_back(Stored{sha256(e.secret), std::move(principal)});
  }
  tokens_ = std::move(next);
}

std::shared_ptr<const Principal> TokenVerifier::verify(std::string_view presented) const {
  const std::array<unsigned char, 32> digest = sha256(presented);
  std::shared_ptr<const Principal> found;
  for (const auto& t : tokens_) {
    // No early exit: every digest is compared whatever matched before.
    if (CRYPTO_memcmp(digest.data(), t.digest.data(), digest.size()) == 0) found = t.principal;
  }
  return found;
}

std::string hostWithoutPort(std::string_view host_header) {
  std::string_view host = host_header;
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close != std::string_view::npos) host = host.substr(0, close + 1);
  } else if (size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  return lowerAscii(host);
}

bool isValidHostField(std::string_view value) {
  std::string_view host = value;
  std::string_view port;
  bool has_port = false;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    // Inside the brackets: an IPv6 address (with an RFC 6874 zone, "%25eth0") or IPvFuture
    // ("v1.x"): unreserved, sub-delims, ':' and '%' characters, at least one.
    const std::string_view literal = host.substr(1, close - 1);
    if (literal.empty() || !kIpLiteralChars.all(literal)) return false;
    const std::string_view after = host.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return false;
      has_port = true;
      port = after.substr(1);
    }
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      has_port = true;
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
    if (!kHostChars.all(host)) return false;
  }
  if (has_port &&
      (port.size() > 5 || !kDigits.all(port))) {
    return false;
  }
  return true;
}

bool isLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "[::1]" || isDottedQuadIn127(host);
}

namespace {

/// isLoopbackHost(hostWithoutPort(value)), remembered for the last value asked about: a client's
/// requests (a gRPC connection's calls above all, whose :authority is 127.0.0.1:port) repeat one
/// Host, and a byte-for-byte compare is a fraction of lower-casing a copy and parsing it (~380
/// instructions a call). A pure function of the value, so the memo can never answer differently;
/// the loop's one thread (thread_local all the same).
bool isLoopbackHostField(std::string_view value) {
  struct Memo {
    std::string value;
    bool loopback = false;
    bool set = false;
  };
  thread_local Memo memo;
  if (memo.set && memo.value == value) return memo.loopback;
  const bool loopback = isLoopbackHost(hostWithoutPort(value));
  if (value.size() <= 256) {  // a long Host is not kept (nor usual)
    memo.value.assign(value);
    memo.loopback = loopback;
    memo.set = true;
  }
  return loopback;
}

}  // namespace

std::optional<Refusal> checkAccess(Request& request, const ListenerPolicy& policy) {
  if (!policy.allowed_uids.empty()) {
    // Fail closed: a peer whose credentials could not be read is not on the list.
    const PeerIdentity* peer = request.peer.get();
    if (peer == nullptr || !peer->has_credentials) {
      return Refusal{403, kPeerNotAllowed, "the peer's uid is unknown (SO_PEERCRED failed)", {}};
    }
    if (std::find(policy.allowed_uids.begin(), policy.allowed_uids.end(), peer->uid) ==
        policy.allowed_uids.end()) {
      return Refusal{403,
                     kPeerNotAllowed,
                     "uid " + std::to_string(peer->uid) + " is not in listen.unix_allowed_uids",
                     {}};
    }
  }
  if (policy.browser_checks) {
    // A web page's request: browsers always send Origin on cross-origin POSTs (and on fetches),
    // curl and HTTP libraries never do. A text/plain POST needs no CORS preflight, so checking
    // here is what stops a page from taking locks.
    for (const auto& [name, value] : request.headers) {
      if (name != "origin") continue;
      const std::string origin = lowerAscii(value);
      if (std::find(policy.allowed_origins.begin(), policy.allowed_origins.end(), origin) ==
          policy.allowed_origins.end()) {
        return Refusal{403,
                       kOriginNotAllowed,
                       "requests from web pages are refused unless their origin is in "
                       "listen.allowed_origins",
                       {}};
      }
    }
    // DNS rebinding: a page on attacker.example re-resolved to 127.0.0.1 still sends
    // Host: attacker.example. A missing Host (HTTP/1.0) is left to the HTTP layer's rules.
    for (const auto& [name, value] : request.headers) {
      if (name != "host") continue;
      if (isLoopbackHostField(value)) continue;
      const std::string host = hostWithoutPort(value);
      if (std::find(policy.allowed_hosts.begin(), policy.allowed_hosts.end(), "*") ==
              policy.allowed_hosts.end() &&
          std::find(policy.allowed_hosts.begin(), policy.allowed_hosts.end(), host) ==
              policy.allowed_hosts.end()) {
        return Refusal{421,
                       kHostNotAllowed,
                       "this server answers only to loopback names and listen.allowed_hosts",
                       {}};
      }
    }
  }
  if (policy.tokens != nullptr) {
    // A credential sent twice is refused, not read first-one-wins: the two may name different
    // scopes, and a request means one thing or it is refused.
    size_t authorizations = 0;
    size_t dapr_tokens = 0;
    for (const auto& [name, value] : request.headers) {
      authorizations += name == "authorization" ? 1 : 0;
      dapr_tokens += name == "dapr-api-token" ? 1 : 0;
    }
    if (authorizations > 1 || dapr_tokens > 1) {
      return unauthorized(kInvalidToken, authorizations > 1
                                             ? "more than one Authorization header"
                                             : "more than one dapr-api-token header");
    }
    const std::string_view bearer = bearerToken(request.header("authorization"));
    const std::string_view dapr = daprApiToken(request.header("dapr-api-token"));
    if (!bearer.empty() && !dapr.empty() && bearer != dapr) {
      // Two different tokens: neither is taken over the other (the scopes would be ambiguous).
      return unauthorized(kInvalidToken,
                          "Authorization: Bearer and dapr-api-token carry different tokens");
    }
    const std::string_view token = bearer.empty() ? dapr : bearer;
    if (!token.empty()) {
      request.principal = policy.tokens->verify(token);
      if (!request.principal) return unauthorized(kInvalidToken, "the bearer token is not valid");
    } else if (policy.token_required &&
               !pathIsListed(policy.token_free_paths,
                             request.raw_path.empty() ? request.path : request.raw_path)) {
      return unauthorized(kTokenRequired,
                          "this listener requires Authorization: Bearer <token> (or Dapr's "
                          "dapr-api-token: <token>)");
    }
  }
  return std::nullopt;
}

Handler guardHandler(const ListenerPolicy& tcp_policy, const ListenerPolicy& unix_policy,
                     Handler inner) {
  return [&tcp_policy, &unix_policy, inner = std::move(inner)](Request& request,
                                                               ResponderPtr responder) {
    const bool over_unix =
        request.peer && request.peer->transport == PeerIdentity::Transport::kUnix;
    const ListenerPolicy& policy = over_unix ? unix_policy : tcp_policy;
    if (auto refusal = checkAccess(request, policy)) {
      sendError(*responder, refusal->status, refusal->code, refusal->message,
                std::move(refusal->headers));
      return;
    }
    inner(request, std::move(responder));
  };
}

}  // namespace sidelock::http
