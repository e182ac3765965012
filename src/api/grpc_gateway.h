// The gRPC services (src/api/proto: dapr.proto.runtime.v1.Dapr, grpc.health.v1.Health,
// sidelock.v1.Locks, sidelock.v1.Elections) as a JSON bridge onto the HTTP routes: each call becomes
// an internal http::Request (method and path from the method table, the path's {fields} and the JSON
// body from the request message by protobuf's JSON mapping, headers from the call's metadata) handed
// to the same guarded handler the HTTP listeners use, so one lock is one lock whatever protocol took
// it, with the same access control, request_id handling and metrics. The route's answer comes back
// through GrpcResponder: a JSON body becomes the response message, an NDJSON stream one message per
// line, an HTTP error a gRPC status (grpcStatusOf, README "gRPC status codes") whose message is the
// error's JSON body. Design: /work/notes/grpc-call-interface.md; the transport is src/grpc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "api/request_body.h"
#include "common/status.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "grpc/server_call.h"
#include "http/http_types.h"
#include "http/router.h"

namespace google::protobuf {
class Descriptor;
}  // namespace google::protobuf

namespace sidelock::metrics {
class Metrics;
}  // namespace sidelock::metrics

namespace sidelock::api {

/// How one gRPC method runs as an HTTP route.
struct GrpcMethod {
  enum class Answer {
    kMessage,    // the route's JSON (or each NDJSON line) is the response message
    kReadiness,  // /readyz: 200 -> SERVING, 503 -> NOT_SERVING (grpc.health.v1.Health/Check)
    kWatch,      // kReadiness, polled, sent on each change (grpc.health.v1.Health/Watch)
  };
  std::string_view name;         // the call's :path, "/sidelock.v1.Locks/Acquire"
  std::string_view http_method;  // "POST"
  /// The route's path; each {field} is the request field of that name (percent-encoded), which
  /// then stays out of the body.
  std::string_view path;
  const google::protobuf::Descriptor* request = nullptr;
  const google::protobuf::Descriptor* response = nullptr;
  bool has_body = true;
  /// JSON members added to the body (the stream hold: "hold": "stream").
  std::string_view extra_body;
  Answer answer = Answer::kMessage;
  /// A route without a body: the request's other fields (those set) go in the query string.
  bool query = false;
  /// The hot unary methods skip the JSON bridge on the way in: their request message becomes the
  /// route's fields directly (directCallOf); everything else the route does is the same.
  enum class Direct { kNone, kAcquire, kRelease, kExtend, kTryLock, kUnlock };
  Direct direct = Direct::kNone;
};

/// The method of a call's :path, or null (then UNIMPLEMENTED).
const GrpcMethod* findGrpcMethod(std::string_view name);

/// The gRPC status of an HTTP error: by its error code (the body's "error", or Dapr's "errorCode")
/// where the code says more than the status, else by the HTTP status (README, "gRPC status codes").
grpc::StatusCode grpcStatusOf(int http_status, std::string_view error_code);

/// The HTTP side of one call: what the gateway hands the router.
struct HttpCall {
  std::string method;
  std::string path;      // decoded
  std::string raw_path;  // percent-encoded, as the router splits it
  std::string body;      // JSON; empty for routes without a body
  std::string query;     // without '?'; empty when none
};

/// How long before a call's deadline its wait ends (GrpcGateway), with `left_ms` to that deadline:
/// room for the route's `locked` answer (and the attempt still in flight when the wait ends) to
/// go out before the deadline's timer ends the call. A tenth of what is left, 5 to 50 ms: a
/// fixed 5 ms lost that race to a loop turn of a loaded machine (2 of 10 calls DEADLINE_EXCEEDED
/// in a CI run with four test processes on two cores).
inline int64_t answerRoomMs(int64_t left_ms) { return std::clamp<int64_t>(left_ms / 10, 5, 50); }

/// A call's deadline as a cap on its request's wait_ms: `left_ms` is the time left before it
/// (never less than 0 is used). A wait_ms over `max_wait_ms` (locks.max_wait_ms) is passed on
/// as sent, so that the route refuses it with or without a deadline.
struct WaitBound {
  int64_t left_ms = 0;
  int64_t max_wait_ms = std::numeric_limits<int64_t>::max();
  /// `wait_ms` capped by the deadline (unchanged when over max_wait_ms).
  int64_t cap(int64_t wait_ms) const {
    if (wait_ms > max_wait_ms) return wait_ms;
    return std::min(wait_ms, std::max<int64_t>(0, left_ms));
  }
};

/// Builds the HTTP request of a call from its request message's bytes. `bound` (the call's
/// deadline, if it has one) caps the body's wait_ms where the request has one. Errors are
/// kInvalidArgument (bytes that are not the message, a path field left empty).
StatusOr<HttpCall> httpCallOf(const GrpcMethod& method, std::string_view request_bytes,
                              std::optional<WaitBound> bound);

/// The HTTP side of a call of a GrpcMethod::direct method without JSON: the path as httpCallOf
/// builds it and the body as the fields the route reads (http::Request::decoded_body), the same
/// fields httpCallOf's JSON body would give it (wait_ms capped alike). Empty when the call needs
/// the JSON bridge: not a direct method, bytes that are not the message or an empty path field (the
/// bridge answers those errors), or a field the direct form does not carry (a health binding).
struct DirectCall {
  HttpCall http;  // body empty
  BodyFields fields;
  std::string path_value;  // the path field's value (decoded): the route's one parameter
};
std::optional<DirectCall> directCallOf(const GrpcMethod& method, std::string_view request_bytes,
                                       std::optional<WaitBound> bound);
/// directCallOf into `out`, which is emptied first and keeps its strings' capacity (the gateway
/// reuses one per call); false where directCallOf is empty (then `out` is unspecified).
bool directCallInto(const GrpcMethod& method, std::string_view request_bytes,
                    std::optional<WaitBound> bound, DirectCall& out);

/// The response message (serialised) of a route's JSON answer; unknown JSON fields are ignored.
StatusOr<std::string> responseMessageOf(const google::protobuf::Descriptor* response,
                                        std::string_view json);

/// responseMessageOf for the flat answers of the lock routes (one object of strings, integers and
/// booleans into a message of such fields), encoded in one pass over the JSON with a per-message
/// field table instead of protobuf's JSON parser: the same bytes. Empty when the answer or the
/// message is not that simple (then responseMessageOf decides, errors included).
std::optional<std::string> flatResponseMessageOf(const google::protobuf::Descriptor* response,
                                                 std::string_view json);

/// The message naming a method sidelock does not serve.
std::string unimplementedMessage(std::string_view method_name);

/// Serves gRPC calls (a grpc::CallHandler) by running the HTTP routes through `guarded`, the same
/// handler (http::guardHandler around the lock router) the HTTP listeners use.
class GrpcGateway {
 public:
  struct Options {
    int64_t health_watch_poll_ms = 1000;  // how often Health/Watch looks at the readiness
    /// Off: every call takes the JSON bridge (tests compare the two paths).
    bool direct_calls = true;
    /// The router inside `guarded` (null: none known). A direct method whose route is exclusive
    /// there (Router::exclusiveRoute) is dispatched to it without matching its path: the guard
    /// still runs first, and the route sees the same request. Must outlive the gateway, with no
    /// route added after.
    const http::Router* router = nullptr;
    /// locks.max_wait_ms: a wait_ms over it is not capped by the call's deadline (WaitBound).
    int64_t max_wait_ms = std::numeric_limits<int64_t>::max();
  };
  GrpcGateway(event::Scheduler& scheduler, metrics::Metrics* metrics, http::Handler guarded,
              Options options);
  GrpcGateway(event::Scheduler& scheduler, metrics::Metrics* metrics, http::Handler guarded)
      : GrpcGateway(scheduler, metrics, std::move(guarded), Options{}) {}
  ~GrpcGateway();
  GrpcGateway(const GrpcGateway&) = delete;
  GrpcGateway& operator=(const GrpcGateway&) = delete;

  void handle(grpc::CallPtr call, std::string request);
  /// A handler for the gRPC servers; it must not outlive the gateway.
  grpc::CallHandler asHandler();
  /// For grpc::GrpcServerOptions::on_refused: counts a call the transport refused under route
  /// "unmatched" with the HTTP status it stands for (empty without metrics).
  std::function<void(int http_status)> refusalCounter();
  /// The sidecar is shutting down (/readyz answers 503 now): every open Health/Watch looks at
  /// once instead of at its next poll, so its client hears NOT_SERVING before the servers close
  /// (as grpc-go's health server sets NOT_SERVING at shutdown).
  void onDraining();

 private:
  struct Watch;

 public:
  /// The series a gRPC call is counted in (sidelock_http_requests_total, _seconds with protocol
  /// "grpc", sidelock_http_in_flight_requests), looked up once per route and code as
  /// http::HttpServer does. Shared with the calls' responders (which may outlive a call).
  class CallMetrics;

 private:
  /// Runs `http_call` through the guarded handler for `call`, answering through `responder`;
  /// returns the route the router matched (empty if none).
  /// `direct`: a direct method's call with its fields, routed without matching where its route is
  /// exclusive.
  std::string_view dispatch(const grpc::ServerCall& call, const HttpCall& http_call,
                            std::shared_ptr<http::Responder> responder,
                            const DirectCall* direct = nullptr, const GrpcMethod* method = nullptr);
  /// The metrics label of `method`'s route: the router's pattern for it (a Dapr row's
  /// "{store_name}" is the route's "{store}"), "unmatched" when the router serves no such route
  /// (Dapr's with dapr off), or the row's path without a router (tests).
  std::string_view routeLabel(const GrpcMethod& method) const;
  void startWatch(grpc::CallPtr call, HttpCall http_call);
  void pollWatch(const std::shared_ptr<Watch>& watch);

  event::Scheduler& scheduler_;
  metrics::Metrics* metrics_;
  http::Handler guarded_;
  Options options_;
  /// The open Health/Watch calls (each with its poll timer), dropped when their call ends.
  std::unordered_set<std::shared_ptr<Watch>> watches_;
  std::shared_ptr<CallMetrics> call_metrics_;  // null without metrics (tests)
  /// Per row of the method table: its route when Options::router has it exclusive (else empty).
  std::vector<std::optional<http::Router::Exclusive>> routed_;
  /// Per method of the table: its route is off in this configuration (Dapr's with dapr.enabled
  /// false), so the method answers UNIMPLEMENTED as one sidelock does not serve.
  std::vector<bool> unserved_;
  /// Reused call after call, so that a call's strings cost no allocation (dispatch()).
  DirectCall direct_scratch_;
  bool direct_busy_ = false;  // direct_scratch_ is in a route's call
  http::Request request_scratch_;
  bool request_busy_ = false;  // request_scratch_ is in a route's call
  event::LivenessToken alive_;
};

}  // namespace sidelock::api
