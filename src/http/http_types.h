// What the HTTP layer hands to handlers and what handlers answer with. The HTTP layer knows
// nothing of locks or Redis: it parses (llhttp), routes, enforces limits, and writes responses in
// request order on each connection (pipelining).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sidelock::http {

/// Who is at the other end of a connection, captured once at accept. Per-peer caps and
/// allow-lists key on it: the uid on the Unix socket (SO_PEERCRED), the address on TCP.
struct PeerIdentity {
  enum class Transport { kUnknown, kTcp, kUnix };
  Transport transport = Transport::kUnknown;
  /// TCP: the peer's IP address as text ("127.0.0.1", "::1"); empty otherwise.
  std::string address;
  int port = 0;  // TCP only
  /// Unix socket: the peer process's credentials at connect time (SO_PEERCRED).
  bool has_credentials = false;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int32_t pid = 0;

  /// A bounded key for per-peer accounting: "uid:1000" on the Unix socket, "ip:127.0.0.1" on
  /// TCP, "" when the peer is unknown (then no per-peer limit applies).
  std::string key() const;
};

/// The caller a verified bearer token stands for (http/access_policy.h). What `scopes` mean is up
/// to the handlers (the lock API reads them as lock-name prefixes); empty = no restriction.
struct Principal {
  std::string label;  // where the token was configured ("auth.tokens_file line 3"), never the token
  std::vector<std::string> scopes;
};

/// A request body an in-process gateway already decoded into fields (src/api's gRPC gateway turns a
/// request message into the fields its route reads), handed to the route in place of JSON text.
/// This layer only carries it (Request::decoded_body); the route that reads it knows its type.
class DecodedBody {
 public:
  virtual ~DecodedBody() = default;
};

class Responder;
struct Request;
/// Called once per request. The request's headers and body are valid during the call only: a
/// handler that answers later copies what it needs (the server frees them while the answer waits).
using Handler = std::function<void(Request& request, std::shared_ptr<Responder> responder)>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // decoded path without the query string
  std::string query;   // raw query string without '?', may be empty
  /// The path as sent (still percent-encoded). The router splits this into segments before
  /// decoding, so an encoded "/" (%2F) stays inside one segment. Empty: the router uses `path`.
  std::string raw_path;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  /// Route parameters filled in by the router ("name" for /v1/locks/{name}/acquire).
  std::vector<std::pair<std::string, std::string>> params;
  /// The route pattern that matched (a bounded label for metrics), e.g. "/v1/locks/{name}/acquire".
  /// Views the Router's table (fixed at start-up, outlives the server) or kUnmatchedRoute.
  std::string_view route;
  int64_t received_us = 0;  // monotonic, when the request head was complete
  /// The event-loop turn the request was dispatched in (never 0 from HttpServer): requests of
  /// one turn may share work, such as one /metrics render.
  uint64_t loop_turn = 0;
  /// The connection's peer (never null for requests from HttpServer; shared because a handler
  /// may hold the request after the connection is gone).
  std::shared_ptr<const PeerIdentity> peer;
  /// Set by the listener's access policy when the request carried a valid bearer token.
  std::shared_ptr<const Principal> principal;
  /// Never set by HttpServer: a gateway's decoded body (then `body` is empty), valid during the
  /// handler call only, like `body`.
  const DecodedBody* decoded_body = nullptr;
  /// Never set by HttpServer: a gateway that already knows the route (Router::exclusiveRoute) sets
  /// it with `routed_pattern` and `params`, and Router::dispatch calls it without matching the
  /// path, setting `route` to routed_pattern then (a request refused before routing keeps the
  /// unmatched label, as over HTTP).
  const Handler* routed_handler = nullptr;
  std::string_view routed_pattern;

  std::string_view header(std::string_view lower_name) const;
  std::string_view param(std::string_view name) const;
  /// Empties every field but keeps the strings' and vectors' capacity, for the next request.
  void clear();
};

/// The answer to one request. Owned jointly by the connection and the handler (shared_ptr), so a
/// handler may answer on a later loop turn; if the client has gone by then, writes are dropped.
/// Exactly one of send() or startStream() may be called; after startStream, writeChunk() any
/// number of times, then endStream().
class Responder {
 public:
  virtual ~Responder() = default;

  /// A complete response. `extra_headers` are "Name: value" pairs.
  virtual void send(int status, std::string_view content_type, std::string body,
                    std::vector<std::pair<std::string, std::string>> extra_headers = {}) = 0;

  /// Starts a chunked response that stays open (newline-delimited JSON event streams).
  virtual void startStream(int status, std::string_view content_type) = 0;
  /// Sends one chunk; returns false if the client is gone.
  virtual bool writeChunk(std::string_view data) = 0;
  /// Ends the chunked response (the connection may then serve the next pipelined request).
  virtual void endStream() = 0;

  /// True while the client connection is open.
  virtual bool clientConnected() const = 0;
  /// Called once if the client disconnects (or the server drops the connection) before the
  /// response completed (send() written, or endStream()). Used to drop queued waiters and to
  /// release stream-held locks. Not called after the response completed.
  virtual void onClientGone(std::function<void()> cb) = 0;
  /// Called at most once, on a later loop turn, when the response given to send() certainly did
  /// not reach the client's application: the connection ended (EOF, reset, write error, server
  /// close) before all of it was written, or the peer reset the connection (ECONNRESET, EPIPE)
  /// while it was the last thing written. Linux resets a TCP connection that is closed with
  /// unread data, or that receives data after it was closed; a Unix socket reports the same as
  /// ECONNRESET / EPIPE: either way the client did not read the answer. A clean close after the
  /// answer never calls it (the client may have read it). Register before send(). The default
  /// ignores it (responders that cannot tell).
  virtual void onUndelivered(std::function<void()> cb) { (void)cb; }
};

/// ASCII case-insensitive comparison (header names and tokens).
bool equalsIgnoreCase(std::string_view a, std::string_view b);

using ResponderPtr = std::shared_ptr<Responder>;

}  // namespace sidelock::http
