// The seam between the gRPC transport (this layer) and the services (src/api): one RPC as a
// ServerCall, handed to a CallHandler with its request message. Messages are opaque bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/http_types.h"  // http::PeerIdentity

namespace sidelock::grpc {

/// gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html).
enum class StatusCode : int {
  kOk = 0, kCancelled = 1, kUnknown = 2, kInvalidArgument = 3, kDeadlineExceeded = 4,
  kNotFound = 5, kAlreadyExists = 6, kPermissionDenied = 7, kResourceExhausted = 8,
  kFailedPrecondition = 9, kAborted = 10, kOutOfRange = 11, kUnimplemented = 12,
  kInternal = 13, kUnavailable = 14, kDataLoss = 15, kUnauthenticated = 16,
};

/// The spare capacity a response message may reserve so that ServerCall::sendMessage frames it in
/// place (the compressed flag and the 4-byte length).
inline constexpr size_t kMessagePrefixRoom = 5;

/// What the client sent with the call (valid for the call's whole life).
struct CallInfo {
  std::string method;  // the :path, e.g. "/sidelock.v1.Locks/Acquire"
  std::string authority;  // :authority
  /// Custom metadata and the ordinary headers (names lower-cased; no pseudo-headers;
  /// "-bin" values are passed as sent, base64).
  std::vector<std::pair<std::string, std::string>> metadata;
  /// Monotonic microseconds (the Scheduler's clock) at which grpc-timeout expires; none without one.
  std::optional<int64_t> deadline_us;
  int64_t received_us = 0;  // monotonic, when the request message was complete
  uint64_t loop_turn = 0;   // as http::Request::loop_turn
  std::shared_ptr<const http::PeerIdentity> peer;  // never null
  std::string_view header(std::string_view lower_name) const;  // "" if absent
};

/// One RPC. Shared by the transport and the handler; a handler may answer on a later loop turn.
/// Unary and server-streaming only: the one request message arrives complete before the handler is
/// called (a second request message is answered UNIMPLEMENTED by the transport).
class ServerCall {
 public:
  virtual ~ServerCall() = default;
  virtual const CallInfo& info() const = 0;
  /// Sends one response message (the transport adds the 5-byte prefix, and the response headers
  /// before the first message; a string with at least 5 bytes of spare capacity is framed in
  /// place, without a copy: kMessagePrefixRoom). Returns false if the call is already gone
  /// (cancelled, finished, connection closed); then nothing is sent.
  virtual bool sendMessage(std::string serialized) = 0;
  /// Ends the call: trailers grpc-status / grpc-message (the transport percent-encodes the message;
  /// trailers-only if no message was sent). At most once; ignored once the call is gone.
  virtual void finish(StatusCode code, std::string_view message) = 0;
  /// True until finish() or until the call is gone.
  virtual bool active() const = 0;
  /// Called once if the call ends before finish(): the client cancelled (RST_STREAM), the
  /// connection closed, or the deadline passed (the transport then answers DEADLINE_EXCEEDED).
  virtual void onCancelled(std::function<void()> cb) = 0;
  /// Called at most once, on a later loop turn, when a unary answer given to sendMessage()+finish()
  /// certainly did not reach the client (stream reset / connection closed before it was written).
  /// Default: ignored. (Maps to http::Responder::onUndelivered, which gives an acquired lease back.)
  virtual void onUndelivered(std::function<void()> cb) { (void)cb; }
};

using CallPtr = std::shared_ptr<ServerCall>;
/// The server calls this for every call, with the request message's bytes (uncompressed).
/// Unknown methods are the handler's business (it answers UNIMPLEMENTED).
using CallHandler = std::function<void(CallPtr call, std::string request)>;

}  // namespace sidelock::grpc
