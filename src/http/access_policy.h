// Who may use a listener: the browser checks (Origin, Host), bearer tokens and, on the Unix
// socket, the peer's uid. A per-listener policy wrapped around the Handler (guardHandler), so the
// server's parsing and connection code stays as it is and the admin listener simply gets a
// different policy. Knows nothing of locks: a token's scopes are opaque strings that the API layer
// reads as lock-name prefixes (README "Access control").
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/token_entry.h"
#include "http/http_types.h"
#include "http/path_pattern.h"

namespace sidelock::http {

/// Error codes of access refusals.
inline constexpr std::string_view kOriginNotAllowed = "origin_not_allowed";
inline constexpr std::string_view kHostNotAllowed = "host_not_allowed";
inline constexpr std::string_view kTokenRequired = "token_required";
inline constexpr std::string_view kInvalidToken = "invalid_token";
inline constexpr std::string_view kPeerNotAllowed = "peer_not_allowed";

/// The bearer tokens of one listener (or of several: the lock listeners share one set). Stores
/// only SHA-256 digests of the tokens; replace() swaps the whole set (SIGHUP reload).
class TokenVerifier {
 public:
  TokenVerifier() = default;
  explicit TokenVerifier(const std::vector<TokenEntry>& entries) { replace(entries); }

  void replace(const std::vector<TokenEntry>& entries);
  size_t size() const { return tokens_.size(); }

  /// The principal `presented` belongs to, or null. Every stored digest is compared with
  /// CRYPTO_memcmp, and all of them, so the time taken says nothing about how much of a token
  /// was right or which one matched; hashing first also hides the stored tokens' lengths.
  std::shared_ptr<const Principal> verify(std::string_view presented) const;

 private:
  struct Stored {
    std::array<unsigned char, 32> digest;
    std::shared_ptr<const Principal> principal;
  };
  std::vector<Stored> tokens_;
};

/// What one listener lets in.
struct ListenerPolicy {
  /// Refuse an Origin not in allowed_origins (403) and a Host that is neither loopback nor in
  /// allowed_hosts (421). Off for the admin listener, which probes reach by pod IP.
  bool browser_checks = true;
  std::vector<std::string> allowed_origins;  // lower-case scheme://host[:port]
  std::vector<std::string> allowed_hosts;    // lower-case, no port; "*" = any Host
  /// Null: tokens are ignored. Otherwise a presented token must be one of these (401 if not) and
  /// its scopes apply; and with token_required every path but token_free_paths needs one. A token
  /// is presented as `Authorization: Bearer <token>` or as Dapr's `dapr-api-token: <token>`
  /// (both at once must be the same token).
  const TokenVerifier* tokens = nullptr;
  bool token_required = true;
  /// Probes (the kubelet cannot send a secret header) and nothing else: route patterns
  /// (http::PathPattern, matched as the Router matches them), so "/v1/elections/{name}/ready",
  /// the leader-only readiness probe, lists the path of every election's. Parsed once, as they
  /// are added (main.cc), never per request.
  PathList token_free_paths = {"/healthz", "/readyz"};
  /// Unix socket peers (Request::peer, SO_PEERCRED): empty = anyone the socket's file mode lets
  /// connect; otherwise a peer without credentials is refused too.
  std::vector<uint32_t> allowed_uids;
};

/// Why a request is refused: the status, error code and message of the JSON answer.
struct Refusal {
  int status = 403;
  std::string_view code;
  std::string message;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// The Host header's host part, without the port ("[::1]:7411" -> "[::1]"), lower-cased.
std::string hostWithoutPort(std::string_view host_header);
/// localhost, a dotted-quad in 127.0.0.0/8, or [::1] (no port).
bool isLoopbackHost(std::string_view host);
/// Whether a Host header (or an :authority) is `host [":" port]` as RFC 9110 7.2 / RFC 3986 3.2
/// write it: a bracketed IPv6 literal or a name of URI host characters, then at most one colon
/// and 0 to 5 digits. No userinfo ("a@b"), no second port ("h:1:2"), no "localhost:abc". Empty is
/// valid (a target without an authority).
bool isValidHostField(std::string_view value);

/// Checks `request` (its headers and Request::peer) against `policy`. On success sets
/// request.principal (when a token was presented and verified) and returns nullopt.
std::optional<Refusal> checkAccess(Request& request, const ListenerPolicy& policy);

/// Wraps `inner` so that every request first passes the policy of the listener it came in on:
/// `unix_policy` for Unix socket peers, `tcp_policy` for the rest. A refused request is answered
/// here (JSON error) and never reaches `inner`. The policies must outlive the handler (main owns
/// them; a SIGHUP reload replaces the tokens inside their TokenVerifier).
Handler guardHandler(const ListenerPolicy& tcp_policy, const ListenerPolicy& unix_policy,
                     Handler inner);

}  // namespace sidelock::http
