#include "api/grpc_gateway.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/json_object.h"
#include "common/log.h"
#include "common/percent_encoding.h"
#include "dapr/proto/runtime/v1/dapr.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "http/http_error.h"
#include "http/router.h"
#include "metrics/metrics.h"
#include "sidelock/v1/locks.pb.h"

namespace sidelock::api {

namespace {

namespace pb = google::protobuf;
using json = nlohmann::json;
using Answer = GrpcMethod::Answer;
using grpc::StatusCode;

namespace dapr = ::dapr::proto::runtime::v1;
namespace health = ::grpc::health::v1;
namespace v1 = ::sidelock::v1;

GrpcMethod row(std::string_view name, std::string_view http_method, std::string_view path,
               const pb::Descriptor* request, const pb::Descriptor* response, bool has_body = true,
               std::string_view extra_body = {}, Answer answer = Answer::kMessage) {
  return GrpcMethod{name, http_method, path, request, response, has_body, extra_body, answer};
}

/// The row with its request's fields in the query string (GET routes with options).
GrpcMethod query(GrpcMethod method) {
  method.query = true;
  return method;
}

/// The row of a hot unary method, whose request message reaches its route without JSON.
GrpcMethod direct(GrpcMethod method, GrpcMethod::Direct kind) {
  method.direct = kind;
  return method;
}
using Direct = GrpcMethod::Direct;

const std::vector<GrpcMethod>& methodTable() {
  // One row per method of src/api/proto: the route it runs (README, "gRPC").
  static const std::vector<GrpcMethod> kTable = {
      // Dapr's lock building block: its HTTP routes (src/api/dapr_api.cc), so its semantics.
      direct(
          row("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", "POST", "/v1.0-alpha1/lock/{store_name}",
              dapr::TryLockRequest::descriptor(), dapr::TryLockResponse::descriptor()),
          Direct::kTryLock),
      direct(row("/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", "POST",
                 "/v1.0-alpha1/unlock/{store_name}", dapr::UnlockRequest::descriptor(),
                 dapr::UnlockResponse::descriptor()),
             Direct::kUnlock),
      row("/dapr.proto.runtime.v1.Dapr/GetMetadata", "GET", "/v1.0/metadata",
          dapr::GetMetadataRequest::descriptor(), dapr::GetMetadataResponse::descriptor(), false),
      row("/grpc.health.v1.Health/Check", "GET", "/readyz",
          health::HealthCheckRequest::descriptor(), health::HealthCheckResponse::descriptor(),
          false, {}, Answer::kReadiness),
      row("/grpc.health.v1.Health/Watch", "GET", "/readyz",
          health::HealthCheckRequest::descriptor(), health::HealthCheckResponse::descriptor(),
          false, {}, Answer::kWatch),
      direct(row("/sidelock.v1.Locks/Acquire", "POST", "/v1/locks/{name}/acquire",
                 v1::AcquireRequest::descriptor(), v1::Grant::descriptor()),
             Direct::kAcquire),
      row("/sidelock.v1.Locks/Hold", "POST", "/v1/locks/{name}/acquire",
          v1::AcquireRequest::descriptor(), v1::HoldEvent::descriptor(), true,
          R"("hold":"stream")"),
      direct(row("/sidelock.v1.Locks/Release", "POST", "/v1/locks/{name}/release",
                 v1::ReleaseRequest::descriptor(), v1::Released::descriptor()),
             Direct::kRelease),
      direct(row("/sidelock.v1.Locks/Extend", "POST", "/v1/locks/{name}/extend",
                 v1::ExtendRequest::descriptor(), v1::Extended::descriptor()),
             Direct::kExtend),
      row("/sidelock.v1.Locks/Inspect", "GET", "/v1/locks/{name}", v1::InspectRequest::descriptor(),
          v1::LockState::descriptor(), false),
      query(row("/sidelock.v1.Locks/Events", "GET", "/v1/locks/{name}/events",
                v1::EventsRequest::descriptor(), v1::LockEvent::descriptor(), false)),
      row("/sidelock.v1.Locks/AcquirePermit", "POST", "/v1/semaphores/{name}/acquire",
          v1::SemaphoreAcquireRequest::descriptor(), v1::Permit::descriptor()),
      row("/sidelock.v1.Locks/HoldPermit", "POST", "/v1/semaphores/{name}/acquire",
          v1::SemaphoreAcquireRequest::descriptor(), v1::HoldEvent::descriptor(), true,
          R"("hold":"stream")"),
      row("/sidelock.v1.Locks/ReleasePermit", "POST", "/v1/semaphores/{name}/release",
          v1::PermitRequest::descriptor(), v1::Released::descriptor()),
      row("/sidelock.v1.Locks/ExtendPermit", "POST", "/v1/semaphores/{name}/extend",
          v1::PermitExtendRequest::descriptor(), v1::Extended::descriptor()),
      row("/sidelock.v1.Locks/InspectSemaphore", "GET", "/v1/semaphores/{name}",
          v1::InspectRequest::descriptor(), v1::SemaphoreState::descriptor(), false),
      row("/sidelock.v1.Locks/AcquireMulti", "POST", "/v1/multilocks/acquire",
          v1::MultiAcquireRequest::descriptor(), v1::MultiGrant::descriptor()),
      row("/sidelock.v1.Locks/ReleaseMulti", "POST", "/v1/multilocks/release",
          v1::MultiReleaseRequest::descriptor(), v1::Released::descriptor()),
      row("/sidelock.v1.Elections/Campaign", "POST", "/v1/elections/{name}/campaign",
          v1::CampaignRequest::descriptor(), v1::CampaignEvent::descriptor()),
      row("/sidelock.v1.Elections/Leader", "GET", "/v1/elections/{name}",
          v1::ElectionRequest::descriptor(), v1::ElectionState::descriptor(), false),
      row("/sidelock.v1.Elections/Observe", "GET", "/v1/elections/{name}/observe",
          v1::ElectionRequest::descriptor(), v1::ObserveEvent::descriptor(), false),
      row("/sidelock.v1.Elections/Proclaim", "POST", "/v1/elections/{name}/proclaim",
          v1::ProclaimRequest::descriptor(), v1::Proclaimed::descriptor()),
      row("/sidelock.v1.Elections/Resign", "POST", "/v1/elections/{name}/resign",
          v1::ResignRequest::descriptor(), v1::Resigned::descriptor()),
  };
  return kTable;
}

/// The services grpc.health.v1.Health answers for ("" is the whole sidecar).
constexpr std::array<std::string_view, 6> kHealthServices = {
    "", "sidelock.v1.Locks", "sidelock.v1.Elections", "dapr.proto.runtime.v1.Dapr",
    "grpc.health.v1.Health", "sidelock"};

/// The JSON of an error the gateway answers itself. http::errorBody replaces bad UTF-8: a
/// message may quote the client's bytes (an unknown method's path), and nlohmann's plain dump()
/// throws on them, which would end the process.
using http::errorBody;

/// A JSON text of the gateway's, bad UTF-8 replaced (U+FFFD) rather than thrown on.
std::string dumpJson(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// protobuf's JSON prints 64-bit integers as strings (proto3 JSON mapping); the routes read
/// numbers. Turns them back into numbers, following the message's descriptor.
void unquoteInt64(json& object, const pb::Descriptor* descriptor) {
  if (!object.is_object()) return;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    auto it = object.find(field->json_name());
    if (it == object.end()) continue;
    auto fix = [&](json& value) {
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        unquoteInt64(value, field->message_type());
      } else if (value.is_string() && field->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT64) {
        value = std::stoll(value.get<std::string>());
      } else if (value.is_string() && field->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64) {
        value = std::stoull(value.get<std::string>());
      }
    };
    if (field->is_repeated() && !field->is_map() && it->is_array()) {
      for (json& element : *it) fix(element);
    } else if (!field->is_map()) {
      fix(*it);
    }
  }
}

/// The error code of an HTTP error body: sidelock's "error", Dapr's "errorCode".
std::string errorCodeOf(const json& body) {
  if (!body.is_object()) return {};
  for (const char* key : {"error", "errorCode"}) {
    auto it = body.find(key);
    if (it != body.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

/// What a call whose route answered `status` with `body` (not 2xx) ends with.
void finishWithError(grpc::ServerCall& call, int status, std::string_view body) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) {
    call.finish(grpcStatusOf(status, ""),
                errorBody("http_" + std::to_string(status), std::string(body.substr(0, 200))));
    return;
  }
  call.finish(grpcStatusOf(status, errorCodeOf(parsed)), dumpJson(parsed));
}

std::string readinessMessage(bool serving) {
  health::HealthCheckResponse response;
  response.set_status(serving ? health::HealthCheckResponse::SERVING
                              : health::HealthCheckResponse::NOT_SERVING);
  return response.SerializeAsString();
}

/// The response message of a route's JSON answer: flat answers (every hot one) without protobuf's
/// JSON parser.
StatusOr<std::string> messageOf(const pb::Descriptor* response, std::string_view json_text) {
  if (std::optional<std::string> flat = flatResponseMessageOf(response, json_text)) {
    return std::move(*flat);
  }
  return responseMessageOf(response, json_text);
}

}  // namespace

class GrpcGateway::CallMetrics {
 public:
  explicit CallMetrics(metrics::Metrics& metrics) : metrics_(metrics) {}
  void enter() { metrics_.http_in_flight.Increment(); }
  void leave() { metrics_.http_in_flight.Decrement(); }
  void record(std::string_view route, int status, std::optional<double> latency_s) {
    auto it = routes_.find(route);
    if (it == routes_.end()) {
      it = routes_.emplace(std::string(route), Route{&metrics_.httpLatency(route, "grpc"), {}})
               .first;
    }
    Route& r = it->second;
    prometheus::Counter* counter = nullptr;
    for (auto& [code, c] : r.codes) {
      if (code == status) counter = c;
    }
    if (counter == nullptr) {
      counter = &metrics_.httpRequests(route, status, "grpc");
      r.codes.emplace_back(status, counter);
    }
    counter->Increment();
    if (latency_s) r.latency->Observe(*latency_s);
  }

 private:
  struct Route {
    prometheus::Histogram* latency = nullptr;
    std::vector<std::pair<int, prometheus::Counter*>> codes;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  metrics::Metrics& metrics_;
  std::unordered_map<std::string, Route, Hash, std::equal_to<>> routes_;
};

namespace {

/// An http::Responder that answers a gRPC call (src/api/grpc_gateway.h).
class GrpcResponder final : public http::Responder {
 public:
  /// Counts the call in sidelock_http_requests_total / _seconds with protocol "grpc" when both
  /// its route (routed()) and its answer are known, and in sidelock_http_in_flight_requests
  /// until it is answered (or dropped unanswered); `metrics` may be null (tests).
  GrpcResponder(grpc::CallPtr call, const GrpcMethod& method,
                std::shared_ptr<GrpcGateway::CallMetrics> metrics,
                const event::Scheduler& scheduler)
      : call_(std::move(call)),
        method_(method),
        metrics_(std::move(metrics)),
        scheduler_(scheduler) {
    if (metrics_ != nullptr) metrics_->enter();
  }
  ~GrpcResponder() override { leaveInFlight(); }
  GrpcResponder(const GrpcResponder&) = delete;
  GrpcResponder& operator=(const GrpcResponder&) = delete;

  /// The route the router matched (empty when the request was refused or matched none).
  void routed(std::string_view route) {
    route_ = route.empty() ? http::kUnmatchedRoute : route;
    if (status_ != 0) record();
  }

  void send(int status, std::string_view /*content_type*/, std::string body,
            std::vector<std::pair<std::string, std::string>> /*extra_headers*/) override {
    // Counted even when the call has ended (its deadline, the client's cancel): the route ran and
    // answered, as an HTTP request whose client left is counted with the route's answer.
    answered(status);
    leaveInFlight();
    if (!call_->active()) return;
    if (method_.answer == Answer::kReadiness && (status == 200 || status == 503)) {
      call_->sendMessage(readinessMessage(status == 200));
      call_->finish(StatusCode::kOk, "");
      return;
    }
    if (status < 200 || status > 299) {
      finishWithError(*call_, status, body);
      return;
    }
    StatusOr<std::string> message = messageOf(method_.response, body);
    if (!message.isOk()) {
      call_->finish(StatusCode::kInternal, errorBody("internal", message.status().message()));
      return;
    }
    call_->sendMessage(std::move(*message));
    call_->finish(StatusCode::kOk, "");
  }

  /// A stream stays in sidelock_http_in_flight_requests until it ends, as an HTTP one does.
  void startStream(int status, std::string_view /*content_type*/) override { answered(status); }

  bool writeChunk(std::string_view data) override {
    if (!call_->active()) return false;
    partial_.append(data);
    size_t start = 0;
    for (size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1) {
      if (!sendLine(std::string_view(partial_).substr(start, end - start))) return false;
    }
    partial_.erase(0, start);
    return call_->active();
  }

  void endStream() override {
    leaveInFlight();
    if (!partial_.empty()) sendLine(partial_);
    partial_.clear();
    call_->finish(StatusCode::kOk, "");
  }

  bool clientConnected() const override { return call_->active(); }
  void onClientGone(std::function<void()> cb) override { call_->onCancelled(std::move(cb)); }
  void onUndelivered(std::function<void()> cb) override { call_->onUndelivered(std::move(cb)); }

 private:
  bool sendLine(std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true;
    StatusOr<std::string> message = messageOf(method_.response, line);
    if (!message.isOk()) {
      call_->finish(StatusCode::kInternal, errorBody("internal", message.status().message()));
      return false;
    }
    return call_->sendMessage(std::move(*message));
  }

  void leaveInFlight() {
    if (metrics_ != nullptr && in_flight_) metrics_->leave();
    in_flight_ = false;
  }
  void answered(int status) {
    if (status_ != 0) return;
    status_ = status;
    latency_s_ = static_cast<double>(scheduler_.nowUs() - call_->info().received_us) / 1e6;
    if (!route_.empty()) record();
  }
  void record() {
    if (metrics_ == nullptr) return;
    std::optional<double> latency;
    if (call_->info().received_us > 0) latency = latency_s_;
    metrics_->record(route_, status_, latency);
  }

  grpc::CallPtr call_;
  const GrpcMethod& method_;
  std::shared_ptr<GrpcGateway::CallMetrics> metrics_;
  const event::Scheduler& scheduler_;
  std::string partial_;    // an NDJSON line not complete yet
  std::string_view route_;  // the router's table (fixed at start-up) or kUnmatchedRoute
  int status_ = 0;          // the route's HTTP status, once answered
  double latency_s_ = 0;
  bool in_flight_ = true;  // counted in sidelock_http_in_flight_requests (until answered or ended)
};

/// The answer of one /readyz look for Health/Watch: serving or not, or the refusal.
class ReadinessProbe final : public http::Responder {
 public:
  using Done = std::function<void(int status, std::string body)>;
  explicit ReadinessProbe(Done done) : done_(std::move(done)) {}
  void send(int status, std::string_view /*content_type*/, std::string body,
            std::vector<std::pair<std::string, std::string>> /*extra_headers*/) override {
    if (done_) std::exchange(done_, nullptr)(status, std::move(body));
  }
  void startStream(int /*status*/, std::string_view /*content_type*/) override {}
  bool writeChunk(std::string_view /*data*/) override { return false; }
  void endStream() override {}
  bool clientConnected() const override { return true; }
  void onClientGone(std::function<void()> /*cb*/) override {}

 private:
  Done done_;
};

/// A method sidelock does not serve still passes the listener's access rules first (a refused
/// caller learns nothing more): its call runs a path no route has, and the router's 404 becomes
/// UNIMPLEMENTED.
constexpr std::string_view kNoRoutePath = "/.grpc/unknown-method";

class UnknownMethodResponder final : public http::Responder {
 public:
  /// Counted as HTTP counts a path no route has: route "unmatched", with the status answered.
  /// `message`: the UNIMPLEMENTED message (unimplementedMessage's by default).
  UnknownMethodResponder(grpc::CallPtr call, std::shared_ptr<GrpcGateway::CallMetrics> metrics,
                         std::string message = "")
      : call_(std::move(call)), metrics_(std::move(metrics)), message_(std::move(message)) {}
  void send(int status, std::string_view /*content_type*/, std::string body,
            std::vector<std::pair<std::string, std::string>> /*extra_headers*/) override {
    if (metrics_ != nullptr) metrics_->record(http::kUnmatchedRoute, status, std::nullopt);
    if (!call_->active()) return;
    if (status == 404 || status == 405) {
      call_->finish(StatusCode::kUnimplemented,
                    message_.empty() ? unimplementedMessage(call_->info().method) : message_);
    } else {
      finishWithError(*call_, status, body);
    }
  }
  void startStream(int /*status*/, std::string_view /*content_type*/) override {}
  bool writeChunk(std::string_view /*data*/) override { return false; }
  void endStream() override {}
  bool clientConnected() const override { return call_->active(); }
  void onClientGone(std::function<void()> cb) override { call_->onCancelled(std::move(cb)); }

 private:
  grpc::CallPtr call_;
  std::shared_ptr<GrpcGateway::CallMetrics> metrics_;
  std::string message_;
};

}  // namespace

const GrpcMethod* findGrpcMethod(std::string_view name) {
  const auto& table = methodTable();
  auto it = std::find_if(table.begin(), table.end(),
                         [&](const GrpcMethod& m) { return m.name == name; });
  return it == table.end() ? nullptr : &*it;
}

StatusCode grpcStatusOf(int http_status, std::string_view error_code) {
  struct ByCode {
    std::string_view code;
    StatusCode status;
  };
  // Where the error code says more than the HTTP status (README, "gRPC status codes").
  static constexpr ByCode kByCode[] = {
      {"locked", StatusCode::kAborted},  // busy: retry (retry_after_ms in the message)
      {"no_permits", StatusCode::kAborted},
      {"not_owner", StatusCode::kFailedPrecondition},
      {"not_held", StatusCode::kFailedPrecondition},
      {"lease_lost", StatusCode::kFailedPrecondition},
      {"limit_mismatch", StatusCode::kFailedPrecondition},
      {"not_leader", StatusCode::kFailedPrecondition},
      {"request_timeout", StatusCode::kDeadlineExceeded},
      {"too_many_waiters", StatusCode::kResourceExhausted},
      {"too_many_connections", StatusCode::kResourceExhausted},
      {"backend_full", StatusCode::kResourceExhausted},
      {"not_implemented", StatusCode::kUnimplemented},
      {"not_supported", StatusCode::kUnimplemented},
      {"method_not_allowed", StatusCode::kUnimplemented},
      {"unsupported_media_type", StatusCode::kInvalidArgument},
      {"request_id_reused", StatusCode::kInvalidArgument},
  };
  for (const ByCode& entry : kByCode) {
    if (entry.code == error_code) return entry.status;
  }
  switch (http_status) {
    case 400: return StatusCode::kInvalidArgument;
    case 401: return StatusCode::kUnauthenticated;
    case 403: return StatusCode::kPermissionDenied;
    case 404: return StatusCode::kNotFound;
    case 405: return StatusCode::kUnimplemented;
    case 408: return StatusCode::kDeadlineExceeded;
    case 409: return StatusCode::kAborted;
    case 412: return StatusCode::kFailedPrecondition;
    case 413: case 414: case 429: case 431: return StatusCode::kResourceExhausted;
    case 415: return StatusCode::kInvalidArgument;
    case 421: return StatusCode::kPermissionDenied;  // host_not_allowed
    case 501: return StatusCode::kUnimplemented;
    case 502: case 503: return StatusCode::kUnavailable;
    case 504: return StatusCode::kDeadlineExceeded;
    default: return StatusCode::kInternal;
  }
}

namespace {

/// sidelock's own messages are read as strictly as the HTTP routes read JSON, which refuse an
/// unknown field: a field this sidecar does not know (from a newer proto) or a known one sent with
/// the wrong wire type (which protobuf keeps as unknown, so that the field silently took its
/// default: a ttl_ms of the wrong type became the default TTL). Dapr's and gRPC health's messages
/// are other projects' contracts, whose newer clients may add fields: protobuf's rule holds there.
bool strictlyRead(const pb::Descriptor* message) {
  return message->file()->package() == "sidelock.v1";
}

bool hasUnknownFields(const pb::Message& m) {
  const pb::Reflection* reflection = m.GetReflection();
  if (!reflection->GetUnknownFields(m).empty()) return true;
  std::vector<const pb::FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(m, field); ++i) {
        if (hasUnknownFields(reflection->GetRepeatedMessage(m, field, i))) return true;
      }
    } else if (hasUnknownFields(reflection->GetMessage(m, field))) {
      return true;
    }
  }
  return false;
}

}  // namespace

StatusOr<HttpCall> httpCallOf(const GrpcMethod& method, std::string_view request_bytes,
                              std::optional<WaitBound> bound) {
  const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(method.request);
  std::unique_ptr<pb::Message> request(prototype->New());
  if (!request->ParseFromArray(request_bytes.data(), static_cast<int>(request_bytes.size()))) {
    return invalidArgument(errorBody(
        "bad_request", "the request is not a valid " + method.request->full_name() + " message"));
  }
  if (strictlyRead(method.request) && hasUnknownFields(*request)) {
    return invalidArgument(errorBody(
        "bad_request", "the " + method.request->full_name() +
                           " has a field this sidecar does not know (a newer proto's, or a known "
                           "field sent with the wrong wire type)"));
  }
  std::string text;
  pb::util::JsonPrintOptions print;
  if (!pb::util::MessageToJsonString(*request, &text, print).ok()) {
    return internalError(errorBody("internal", "cannot print the request as JSON"));
  }
  json body = json::parse(text, nullptr, false);
  if (!body.is_object()) body = json::object();
  unquoteInt64(body, method.request);

  HttpCall out;
  out.method = std::string(method.http_method);
  // The path: each {field} is taken from the request (and stays out of the body).
  std::string_view rest = method.path;
  while (!rest.empty()) {
    const size_t open = rest.find('{');
    if (open == std::string_view::npos) {
      out.path.append(rest);
      out.raw_path.append(rest);
      break;
    }
    const size_t close = rest.find('}', open);
    out.path.append(rest.substr(0, open));
    out.raw_path.append(rest.substr(0, open));
    const std::string field_name(rest.substr(open + 1, close - open - 1));
    const pb::FieldDescriptor* field = method.request->FindFieldByName(field_name);
    std::string value;
    if (field != nullptr) {
      auto it = body.find(field->json_name());
      if (it != body.end() && it->is_string()) value = it->get<std::string>();
      if (it != body.end()) body.erase(it);
    }
    if (value.empty()) {
      if (method.name.starts_with("/dapr.")) {
        // Dapr's methods have one path field, the store name: answered as Dapr answers a store
        // it has not (ERR_LOCK_STORE_NOT_FOUND, INVALID_ARGUMENT), in Dapr's error shape.
        return invalidArgument(
            JsonObject()
                .text("errorCode", "ERR_LOCK_STORE_NOT_FOUND")
                .text("message", "lock store \"\" is not found (" + field_name + " is empty)")
                .finishNested());
      }
      return invalidArgument(errorBody("bad_request", field_name + " is required"));
    }
    out.path.append(value);
    out.raw_path.append(percentEncode(value, PercentKeep::kUnreserved));
    rest.remove_prefix(close + 1);
  }
  if (method.query) {
    for (const auto& [key, value] : body.items()) {
      if (!out.query.empty()) out.query += '&';
      out.query += percentEncode(key, PercentKeep::kUnreserved) + '=' +
                   percentEncode(value.is_string() ? value.get<std::string>() : dumpJson(value),
                                 PercentKeep::kUnreserved);
    }
  }
  if (!method.has_body) return out;
  if (!method.extra_body.empty()) {
    json extra = json::parse("{" + std::string(method.extra_body) + "}");
    body.update(extra);
  }
  if (bound && method.request->FindFieldByName("wait_ms") != nullptr) {
    auto it = body.find("wait_ms");
    if (it != body.end() && it->is_number_integer()) *it = bound->cap(it->get<int64_t>());
  }
  out.body = dumpJson(body);
  return out;
}

namespace {

/// The path of a direct method: its one {field} replaced by `value` (as httpCallOf does).
void directPath(const GrpcMethod& method, std::string_view value, DirectCall& direct) {
  HttpCall& out = direct.http;
  direct.path_value = value;
  const size_t open = method.path.find('{');
  const size_t close = method.path.find('}', open);
  const std::string_view head = method.path.substr(0, open);
  const std::string_view tail = method.path.substr(close + 1);
  out.path.append(head).append(value).append(tail);
  out.raw_path.append(head);
  appendPercentEncoded(out.raw_path, value, PercentKeep::kUnreserved);
  out.raw_path.append(tail);
}

/// proto3 JSON prints a scalar only when it is not its default; the bridge's body has the same.
void putInt(BodyFields& fields, BodyField field, int64_t value) {
  if (value != 0) fields.integer(field, value);
}
void putBool(BodyFields& fields, BodyField field, bool value) {
  if (value) fields.boolean(field, value);
}
void putText(BodyFields& fields, BodyField field, const std::string& value) {
  if (!value.empty()) fields.text(field, value);
}

/// wait_ms as the bridge caps it by the call's deadline.
int64_t boundedWait(int64_t wait_ms, const std::optional<WaitBound>& bound) {
  return bound ? bound->cap(wait_ms) : wait_ms;
}

/// A call over this many bytes (its request message, or its request's strings) lets the objects
/// reused from call to call go (ReusedMessage, GrpcGateway's DirectCall and http::Request) instead
/// of keeping their capacity.
constexpr size_t kKeptCallBytes = 16 * 1024;

/// One use of an object reused call after call (GrpcGateway's DirectCall and http::Request: its
/// strings keep their capacity), or of a fresh one when a call is made from inside the call that
/// has it (none today). The reused one is busy while this lives.
template <typename T>
class ScratchUse {
 public:
  ScratchUse(T& scratch, bool& busy) : busy_(busy ? nullptr : &busy) {
    if (busy_ != nullptr) {
      *busy_ = true;
      object_ = &scratch;
    } else {
      object_ = &nested_.emplace();
    }
  }
  ~ScratchUse() {
    if (busy_ != nullptr) *busy_ = false;
  }
  ScratchUse(const ScratchUse&) = delete;
  ScratchUse& operator=(const ScratchUse&) = delete;
  T& get() { return *object_; }
  /// The reused object (not a fresh one): what it keeps is the caller's to trim.
  bool reused() const { return busy_ != nullptr; }

 private:
  bool* busy_;               // the reused object's flag, null when nested
  std::optional<T> nested_;  // constructed only when needed
  T* object_;
};

/// The request message of a direct call, parsed into one reused message per type (the loop's
/// thread): parsing clears it, and its strings keep their capacity for the next call, unless this
/// one was large (then the message is let go as this goes out of scope). get() is null when the
/// bytes are not the message.
template <typename M>
class ReusedMessage {
 public:
  explicit ReusedMessage(std::string_view bytes)
      : bytes_(bytes.size()),
        parsed_(message().ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {}
  ~ReusedMessage() {
    if (bytes_ > kKeptCallBytes) message() = M();
  }
  ReusedMessage(const ReusedMessage&) = delete;
  ReusedMessage& operator=(const ReusedMessage&) = delete;
  /// Null when the bytes are not a message, or (sidelock's own messages) carry a field this
  /// sidecar does not know: httpCallOf then refuses them with the reason.
  /// (Top level only: the one nested message a direct method has, AcquireRequest's health, sends
  /// the call the generic way, which looks at every level.)
  const M* get() const {
    static const bool strict = strictlyRead(M::descriptor());
    if (!parsed_) return nullptr;
    if (strict && !message().GetReflection()->GetUnknownFields(message()).empty()) return nullptr;
    return &message();
  }

 private:
  static M& message() {
    thread_local M reused;
    return reused;
  }
  size_t bytes_;
  bool parsed_;
};

}  // namespace

bool directCallInto(const GrpcMethod& method, std::string_view request_bytes,
                    std::optional<WaitBound> bound, DirectCall& out) {
  out.http.method.assign(method.http_method);
  out.http.path.clear();
  out.http.raw_path.clear();
  out.http.body.clear();
  out.http.query.clear();
  out.fields.clear();
  out.path_value.clear();
  BodyFields& f = out.fields;
  // Each case: the fields in the order of the message (the bridge's JSON order; the route reads by
  // field, so the order does not matter), then the path field.
  switch (method.direct) {
    case Direct::kNone:
      return false;
    case Direct::kAcquire: {
      const ReusedMessage<v1::AcquireRequest> message(request_bytes);
      const v1::AcquireRequest* parsed = message.get();
      if (parsed == nullptr || parsed->name().empty() || parsed->has_health()) return false;
      const v1::AcquireRequest& m = *parsed;
      f.reserve(4);  // the usual acquire: ttl_ms, owner, and wait_ms or one option
      putInt(f, BodyField::kTtlMs, m.ttl_ms());
      // Present when sent (as in the bridge's JSON), then capped: a cap to 0 is still a 0 sent.
      if (m.wait_ms() != 0) f.integer(BodyField::kWaitMs, boundedWait(m.wait_ms(), bound));
      putText(f, BodyField::kOwner, m.owner());
      putBool(f, BodyField::kAutoRenew, m.auto_renew());
      putInt(f, BodyField::kMaxHoldMs, m.max_hold_ms());
      putText(f, BodyField::kRequestId, m.request_id());
      putBool(f, BodyField::kReentrant, m.reentrant());
      putText(f, BodyField::kMode, m.mode());
      putBool(f, BodyField::kFair, m.fair());
      putText(f, BodyField::kHolder, m.holder());
      putInt(f, BodyField::kLockDelayMs, m.lock_delay_ms());
      directPath(method, m.name(), out);
      break;
    }
    case Direct::kRelease: {
      const ReusedMessage<v1::ReleaseRequest> message(request_bytes);
      const v1::ReleaseRequest* parsed = message.get();
      if (parsed == nullptr || parsed->name().empty()) return false;
      const v1::ReleaseRequest& m = *parsed;
      putText(f, BodyField::kOwner, m.owner());
      putText(f, BodyField::kMode, m.mode());
      putText(f, BodyField::kRequestId, m.request_id());
      directPath(method, m.name(), out);
      break;
    }
    case Direct::kExtend: {
      const ReusedMessage<v1::ExtendRequest> message(request_bytes);
      const v1::ExtendRequest* parsed = message.get();
      if (parsed == nullptr || parsed->name().empty()) return false;
      const v1::ExtendRequest& m = *parsed;
      putText(f, BodyField::kOwner, m.owner());
      putInt(f, BodyField::kTtlMs, m.ttl_ms());
      putText(f, BodyField::kMode, m.mode());
      directPath(method, m.name(), out);
      break;
    }
    case Direct::kTryLock: {
      const ReusedMessage<dapr::TryLockRequest> message(request_bytes);
      const dapr::TryLockRequest* parsed = message.get();
      if (parsed == nullptr || parsed->store_name().empty()) return false;
      const dapr::TryLockRequest& m = *parsed;
      putText(f, BodyField::kResourceId, m.resource_id());
      putText(f, BodyField::kLockOwner, m.lock_owner());
      putInt(f, BodyField::kExpiryInSeconds, m.expiry_in_seconds());
      directPath(method, m.store_name(), out);
      break;
    }
    case Direct::kUnlock: {
      const ReusedMessage<dapr::UnlockRequest> message(request_bytes);
      const dapr::UnlockRequest* parsed = message.get();
      if (parsed == nullptr || parsed->store_name().empty()) return false;
      const dapr::UnlockRequest& m = *parsed;
      putText(f, BodyField::kResourceId, m.resource_id());
      putText(f, BodyField::kLockOwner, m.lock_owner());
      directPath(method, m.store_name(), out);
      break;
    }
  }
  return true;
}

std::optional<DirectCall> directCallOf(const GrpcMethod& method, std::string_view request_bytes,
                                       std::optional<WaitBound> bound) {
  DirectCall out;
  if (!directCallInto(method, request_bytes, bound, out)) return std::nullopt;
  return out;
}

namespace {

/// How flatResponseMessageOf writes one field of a flat message.
struct FlatField {
  std::string json_name;
  std::string name;
  int number = 0;
  pb::FieldDescriptor::CppType type{};
  const pb::EnumDescriptor* enum_type = nullptr;  // CPPTYPE_ENUM: its values
};

/// A message's fields by number, or `flat` false when one is not a plain scalar
/// flatResponseMessageOf writes (a message, repeated, map, floating point, bytes).
struct FlatTable {
  bool flat = true;
  /// No key (name or json_name) names two fields: a key's first match is the only one, so
  /// FlatReader::fieldOf may try a likely field before scanning.
  bool distinct_keys = true;
  std::vector<FlatField> fields;
};

const FlatTable& flatTableOf(const pb::Descriptor* descriptor) {
  // Built once per message type (the loop's one thread; the descriptors live for the process).
  static std::unordered_map<const pb::Descriptor*, FlatTable> tables;
  auto it = tables.find(descriptor);
  if (it != tables.end()) return it->second;
  FlatTable table;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    const auto type = field->cpp_type();
    const bool scalar =
        type == pb::FieldDescriptor::CPPTYPE_INT32 || type == pb::FieldDescriptor::CPPTYPE_INT64 ||
        type == pb::FieldDescriptor::CPPTYPE_UINT32 ||
        type == pb::FieldDescriptor::CPPTYPE_UINT64 || type == pb::FieldDescriptor::CPPTYPE_BOOL ||
        type == pb::FieldDescriptor::CPPTYPE_ENUM ||
        (type == pb::FieldDescriptor::CPPTYPE_STRING &&
         field->type() == pb::FieldDescriptor::TYPE_STRING);
    const bool plain_wire = field->type() != pb::FieldDescriptor::TYPE_SINT32 &&
                            field->type() != pb::FieldDescriptor::TYPE_SINT64 &&
                            field->type() != pb::FieldDescriptor::TYPE_FIXED32 &&
                            field->type() != pb::FieldDescriptor::TYPE_FIXED64 &&
                            field->type() != pb::FieldDescriptor::TYPE_SFIXED32 &&
                            field->type() != pb::FieldDescriptor::TYPE_SFIXED64;
    if (!scalar || !plain_wire || field->is_repeated() ||
        field->real_containing_oneof() != nullptr || field->has_presence()) {
      table.flat = false;
    }
    table.fields.push_back(
        FlatField{field->json_name(), field->name(), field->number(), type, field->enum_type()});
  }
  std::sort(table.fields.begin(), table.fields.end(),
            [](const FlatField& a, const FlatField& b) { return a.number < b.number; });
  for (size_t i = 0; i < table.fields.size(); ++i) {
    const FlatField& a = table.fields[i];
    for (size_t j = i + 1; j < table.fields.size(); ++j) {
      const FlatField& b = table.fields[j];
      if (a.json_name == b.json_name || a.json_name == b.name || a.name == b.json_name ||
          a.name == b.name) {
        table.distinct_keys = false;
      }
    }
  }
  return tables.emplace(descriptor, std::move(table)).first->second;
}

/// A flat JSON object (what JsonObject writes: string, integer and boolean members) read into the
/// values of a FlatTable's fields, then encoded. Anything else stops it, so that protobuf's JSON
/// parser decides: nesting, null, a fraction or exponent, an escape or a non-ASCII byte in a
/// string, a value of a type its field does not take, an integer out of its field's range, an enum
/// number the enum lacks, a duplicate, anything that is not JSON.
class FlatReader {
 public:
  explicit FlatReader(const FlatTable& table) : table_(table) {
    // Every message sidelock answers has fewer fields than kInlineValues: no allocation per answer.
    // Only the values of the table's fields are cleared (not all of inline_).
    if (table.fields.size() > kInlineValues) heap_.resize(table.fields.size());
    values_ = heap_.empty() ? inline_ : heap_.data();
    for (size_t i = 0; i < table.fields.size(); ++i) values_[i] = Value{};
  }
  FlatReader(const FlatReader&) = delete;  // values_ points into the reader
  FlatReader& operator=(const FlatReader&) = delete;

  bool read(std::string_view text) {
    text_ = text;
    pos_ = 0;
    space();
    if (!take('{')) return false;
    space();
    if (take('}')) return end();
    for (;;) {
      const char* key = nullptr;
      size_t key_size = 0;
      if (!string(key, key_size)) return false;
      space();
      if (!take(':')) return false;
      space();
      if (!value(std::string_view(key, key_size))) return false;
      space();
      if (take('}')) return end();
      if (!take(',')) return false;
      space();
    }
  }

  /// The message's bytes: the fields set in number order, defaults left out (proto3).
  std::string encode() const {
    // Written through a pointer into a buffer sized once for the longest encoding, then cut to
    // what was written (a push_back per byte checked the capacity each time). The bound holds
    // whatever the table: a string's bytes are in the JSON, and each field adds at most 16 more
    // (a tag and a length of at most 5 bytes each; an integer of at most 10, a negative one's
    // JSON being shorter). The room left lets the transport frame it in place
    // (grpc::kMessagePrefixRoom).
    const size_t bound = text_.size() + 16 * table_.fields.size();
    std::string out;
    out.reserve(grpc::kMessagePrefixRoom + bound);
    out.resize(bound);
    char* const begin = out.data();
    char* p = begin;
    for (size_t i = 0; i < table_.fields.size(); ++i) {
      const Value& v = values_[i];
      if (!v.set) continue;
      const FlatField& f = table_.fields[i];
      if (f.type == pb::FieldDescriptor::CPPTYPE_STRING) {
        if (v.text_size == 0) continue;
        p = varint(p, static_cast<uint64_t>(f.number) << 3 | 2);
        p = varint(p, v.text_size);
        memcpy(p, v.text, v.text_size);
        p += v.text_size;
      } else {
        if (v.bits == 0) continue;
        p = varint(p, static_cast<uint64_t>(f.number) << 3);
        p = varint(p, v.bits);
      }
    }
    out.resize(static_cast<size_t>(p - begin));  // shorter: no allocation
    return out;
  }

 private:
  // Trivial, so that the inline values cost nothing until the constructor clears those it uses.
  struct Value {
    bool set;
    uint64_t bits;     // an integer or a boolean as its varint
    const char* text;  // a string (views the JSON text), text_size bytes
    size_t text_size;
  };

  /// Bytes a JSON string of the flat form cannot hold unescaped: its end, an escape, a control
  /// character, anything not ASCII. One load per byte in string().
  static constexpr std::array<bool, 256> kStringStops = [] {
    std::array<bool, 256> stops{};
    for (size_t c = 0; c < 0x20; ++c) stops[c] = true;
    for (size_t c = 0x80; c < 256; ++c) stops[c] = true;
    stops['"'] = true;
    stops['\\'] = true;
    return stops;
  }();

  static char* varint(char* p, uint64_t value) {
    while (value >= 0x80) {
      *p++ = static_cast<char>(value | 0x80);
      value >>= 7;
    }
    *p++ = static_cast<char>(value);
    return p;
  }
  void space() {
    // Usually none (JsonObject writes none): the first byte decides.
    size_t i = pos_;
    while (i < text_.size() &&
           (text_[i] == ' ' || text_[i] == '\n' || text_[i] == '\r' || text_[i] == '\t')) {
      ++i;
    }
    pos_ = i;
  }
  bool take(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool end() {
    space();
    return pos_ == text_.size();
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  /// A string without escapes, of printable ASCII only.
  bool string(const char*& out, size_t& out_size) {
    if (!take('"')) return false;
    // A local cursor: the loop keeps it in a register (pos_ is written once, at the end).
    const char* const data = text_.data();
    const size_t size = text_.size();
    const size_t start = pos_;
    size_t i = start;
    while (i < size && !kStringStops[static_cast<unsigned char>(data[i])]) ++i;
    if (i == size || data[i] != '"') return false;
    out = data + start;
    out_size = i - start;
    pos_ = i + 1;
    return true;
  }
  /// The field of `key` (its index), -1 for a key the message does not have. The answers' members
  /// come in the message's field order (JsonObject writes them so), so the field after the last
  /// one found is tried first: one comparison per member instead of a scan from the first field.
  int fieldOf(std::string_view key) {
    const size_t count = table_.fields.size();
    if (table_.distinct_keys && next_ < count && key == table_.fields[next_].json_name) {
      return static_cast<int>(next_++);
    }
    for (size_t i = 0; i < count; ++i) {
      if (key == table_.fields[i].json_name || key == table_.fields[i].name) {
        next_ = i + 1;
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  bool value(std::string_view key) {
    const int index = fieldOf(key);
    Value scratch{};
    Value& v = index < 0 ? scratch : values_[static_cast<size_t>(index)];
    if (v.set) return false;  // a duplicate
    v.set = true;
    const pb::FieldDescriptor::CppType type =
        index < 0 ? pb::FieldDescriptor::CppType{} : table_.fields[static_cast<size_t>(index)].type;
    const char c = pos_ < text_.size() ? text_[pos_] : '\0';
    if (c == '"') {
      return string(v.text, v.text_size) &&
             (index < 0 || type == pb::FieldDescriptor::CPPTYPE_STRING);
    }
    if (c == 't' || c == 'f') {
      v.bits = c == 't' ? 1 : 0;
      return literal(c == 't' ? "true" : "false") &&
             (index < 0 || type == pb::FieldDescriptor::CPPTYPE_BOOL);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return integer(index, v);
    return false;
  }
  bool integer(int index, Value& v) {
    const bool negative = take('-');
    const size_t start = pos_;
    uint64_t magnitude = 0;
    size_t i = start;  // a local cursor, as in string()
    for (; i < text_.size() && text_[i] >= '0' && text_[i] <= '9'; ++i) {
      if (magnitude > (UINT64_MAX - 9) / 10) return false;  // past 64 bits
      magnitude = magnitude * 10 + static_cast<uint64_t>(text_[i] - '0');
    }
    pos_ = i;
    const size_t digits = pos_ - start;
    if (digits == 0 || (digits > 1 && text_[start] == '0')) return false;
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      return false;
    }
    if (index < 0) return true;  // an unknown field's number: ignored
    const FlatField& f = table_.fields[static_cast<size_t>(index)];
    const auto max_signed = static_cast<uint64_t>(INT64_MAX);
    if (negative && magnitude > max_signed + 1) return false;
    const int64_t signed_value =
        negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    bool fits = false;
    switch (f.type) {
      case pb::FieldDescriptor::CPPTYPE_INT64:
        fits = negative || magnitude <= max_signed;
        break;
      case pb::FieldDescriptor::CPPTYPE_INT32:
        fits = (negative || magnitude <= max_signed) && signed_value >= INT32_MIN &&
               signed_value <= INT32_MAX;
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT64:
        fits = !negative;
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
        fits = !negative && magnitude <= UINT32_MAX;
        break;
      case pb::FieldDescriptor::CPPTYPE_ENUM:
        fits = (negative || magnitude <= max_signed) && signed_value >= INT32_MIN &&
               signed_value <= INT32_MAX &&
               f.enum_type->FindValueByNumber(static_cast<int>(signed_value)) != nullptr;
        break;
      default:
        break;  // a bool or a string field
    }
    // A negative int32 or int64 is its 64-bit two's complement: ten bytes, as protobuf writes it.
    v.bits = negative ? static_cast<uint64_t>(signed_value) : magnitude;
    return fits;
  }

  static constexpr size_t kInlineValues = 16;

  const FlatTable& table_;
  Value inline_[kInlineValues];  // NOLINT(*-avoid-c-arrays): left uninitialised on purpose
  std::vector<Value> heap_;  // a message of more fields than kInlineValues
  Value* values_ = nullptr;  // inline_ or heap_, one per field of table_
  std::string_view text_;
  size_t pos_ = 0;
  size_t next_ = 0;  // the field fieldOf() tries first
};

}  // namespace

std::optional<std::string> flatResponseMessageOf(const pb::Descriptor* response,
                                                 std::string_view text) {
  const FlatTable& table = flatTableOf(response);
  if (!table.flat) return std::nullopt;
  FlatReader reader(table);
  if (!reader.read(text)) return std::nullopt;
  return reader.encode();
}

StatusOr<std::string> responseMessageOf(const pb::Descriptor* response, std::string_view text) {
  const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(response);
  std::unique_ptr<pb::Message> message(prototype->New());
  pb::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  const auto parsed = pb::util::JsonStringToMessage(
      pb::StringPiece(text.data(), text.size()), message.get(), parse);
  if (!parsed.ok()) {
    return internalError("the route's answer is not a " + response->full_name() + ": " +
                         std::string(parsed.message()));
  }
  return message->SerializeAsString();
}

std::string unimplementedMessage(std::string_view method_name) {
  return errorBody("not_implemented",
                   "sidelock does not implement " + std::string(method_name) +
                       " (served: Dapr's TryLockAlpha1, UnlockAlpha1, GetMetadata; "
                       "grpc.health.v1.Health; sidelock.v1.Locks; sidelock.v1.Elections)");
}

struct GrpcGateway::Watch {
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  /// An open Watch is in sidelock_http_in_flight_requests until the gateway lets it go.
  explicit Watch(std::shared_ptr<CallMetrics> metrics) : in_flight(std::move(metrics)) {
    if (in_flight != nullptr) in_flight->enter();
  }
  ~Watch() {
    if (in_flight != nullptr) in_flight->leave();
  }
  grpc::CallPtr call;
  HttpCall http_call;
  std::optional<bool> last_sent;
  event::ScopedTimer timer;
  std::shared_ptr<CallMetrics> in_flight;
};

namespace {

/// libprotobuf logs a request's invalid UTF-8 (and other parse complaints) itself, as raw lines on
/// stderr: outside the sidecar's log format, and at a rate any client chooses. The call already
/// answers INVALID_ARGUMENT; the line goes to the sidecar's log at debug level.
void protobufLogLine(pb::LogLevel level, const char* file, int line, const std::string& message) {
  if (level == pb::LOGLEVEL_FATAL) {
    SL_LOG(kError, "protobuf.fatal", {"message", message},
           {"at", std::string(file) + ":" + std::to_string(line)});
    return;
  }
  SL_LOG(kDebug, "protobuf.log", {"message", message});
}

}  // namespace

GrpcGateway::GrpcGateway(event::Scheduler& scheduler, metrics::Metrics* metrics,
                         http::Handler guarded, Options options)
    : scheduler_(scheduler),
      metrics_(metrics),
      guarded_(std::move(guarded)),
      options_(options),
      call_metrics_(metrics == nullptr ? nullptr : std::make_shared<CallMetrics>(*metrics)) {
  pb::SetLogHandler(&protobufLogLine);
  const auto& table = methodTable();
  routed_.resize(table.size());
  unserved_.resize(table.size());
  if (options_.router == nullptr) return;
  for (size_t i = 0; i < table.size(); ++i) {
    const GrpcMethod& method = table[i];
    unserved_[i] = routeLabel(method) == http::kUnmatchedRoute;
    if (method.direct == GrpcMethod::Direct::kNone) continue;
    routed_[i] = options_.router->exclusiveRoute(method.http_method, method.path);
    // A direct method's path has one {field} (directPath): the route's one parameter.
    if (routed_[i] && routed_[i]->params.size() != 1) routed_[i].reset();
  }
}

GrpcGateway::~GrpcGateway() = default;

std::string_view GrpcGateway::routeLabel(const GrpcMethod& method) const {
  if (options_.router != nullptr) {
    // The row's path with its "{field}" segments matches the route's "{param}" ones.
    const http::Router::Match m = options_.router->match(method.http_method, method.path);
    if (m.kind == http::Router::Match::Kind::kFound) return m.route;
    return http::kUnmatchedRoute;  // a route not served (Dapr's when dapr is off)
  }
  return method.path;
}

grpc::CallHandler GrpcGateway::asHandler() {
  return [this](grpc::CallPtr call, std::string request) {
    handle(std::move(call), std::move(request));
  };
}

std::function<void(int)> GrpcGateway::refusalCounter() {
  if (call_metrics_ == nullptr) return {};
  return [metrics = call_metrics_](int http_status) {
    // Before any route, as the HTTP listener counts a request its transport refused.
    metrics->record(http::kUnmatchedRoute, http_status, std::nullopt);
  };
}

void GrpcGateway::handle(grpc::CallPtr call, std::string request) {
  const grpc::CallInfo& info = call->info();
  const GrpcMethod* method = findGrpcMethod(info.method);
  const bool unserved =
      method != nullptr && unserved_[static_cast<size_t>(method - methodTable().data())];
  if (method == nullptr || unserved) {
    // Through the guard as any call (access control first), to no route.
    std::string message;
    if (unserved) {
      message = errorBody("not_implemented",
                          std::string(info.method) +
                              " is not served by this sidecar: its route is off in the "
                              "configuration (Dapr's methods need dapr.enabled: true)");
    }
    const HttpCall no_route{"POST", std::string(kNoRoutePath), std::string(kNoRoutePath), "", ""};
    dispatch(*call, no_route,
             std::make_shared<UnknownMethodResponder>(call, call_metrics_, std::move(message)));
    return;
  }
  std::optional<WaitBound> wait_bound;
  if (info.deadline_us) {
    // The wait ends answerRoomMs() before the call's deadline: a lock still held then answers
    // `locked` (ABORTED), rather than a coin toss with the deadline's own timer, due the same
    // millisecond, which ends the call DEADLINE_EXCEEDED (both came about half the time).
    const int64_t deadline_left_ms = (*info.deadline_us - scheduler_.nowUs()) / 1000;
    const int64_t left_ms = deadline_left_ms - answerRoomMs(deadline_left_ms);
    wait_bound = WaitBound{left_ms, options_.max_wait_ms};
  }
  if (method->direct != GrpcMethod::Direct::kNone && options_.direct_calls) {
    // The direct call is reused too (its strings keep their capacity), in place: the route
    // reads its fields (decoded_body) during dispatch().
    ScratchUse<DirectCall> scratch(direct_scratch_, direct_busy_);
    DirectCall& direct = scratch.get();
    if (directCallInto(*method, request, wait_bound, direct)) {
      auto responder = std::make_shared<GrpcResponder>(call, *method, call_metrics_, scheduler_);
      responder->routed(dispatch(*call, direct.http, responder, &direct, method));
      // A large call's strings (path, fields) are not kept for the next one: the request
      // message's size bounds them all.
      if (scratch.reused() && request.size() > kKeptCallBytes) direct = DirectCall();
      return;
    }
  }
  StatusOr<HttpCall> http_call = httpCallOf(*method, request, wait_bound);
  if (!http_call.isOk()) {
    // Counted under the method's route as the route's own 400 for a bad body would be (a
    // message that does not parse, a path field missing).
    const bool invalid = http_call.status().code() == sidelock::StatusCode::kInvalidArgument;
    if (call_metrics_ != nullptr) {
      call_metrics_->record(routeLabel(*method), invalid ? 400 : 500, std::nullopt);
    }
    call->finish(invalid ? StatusCode::kInvalidArgument : StatusCode::kInternal,
                 http_call.status().message());
    return;
  }
  if (method->answer != Answer::kMessage) {
    health::HealthCheckRequest check;
    (void)check.ParseFromString(request);
    if (std::find(kHealthServices.begin(), kHealthServices.end(), check.service()) ==
        kHealthServices.end()) {
      if (method->answer == Answer::kReadiness) {
        call->finish(StatusCode::kNotFound,
                     errorBody("not_found", "unknown service \"" + check.service() + "\""));
      } else {
        health::HealthCheckResponse unknown;
        unknown.set_status(health::HealthCheckResponse::SERVICE_UNKNOWN);
        call->sendMessage(unknown.SerializeAsString());  // and the call stays open (the spec)
      }
      return;
    }
    if (method->answer == Answer::kWatch) {
      startWatch(std::move(call), std::move(*http_call));
      return;
    }
  }
  auto responder = std::make_shared<GrpcResponder>(call, *method, call_metrics_, scheduler_);
  responder->routed(dispatch(*call, *http_call, responder));
}

std::string_view GrpcGateway::dispatch(const grpc::ServerCall& call, const HttpCall& http_call,
                                       std::shared_ptr<http::Responder> responder,
                                       const DirectCall* direct, const GrpcMethod* method) {
  const grpc::CallInfo& info = call.info();
  const http::DecodedBody* decoded_body = direct == nullptr ? nullptr : &direct->fields;
  // One request reused call after call (its strings keep their capacity, as HttpServer's do): a
  // route reads it during the call only (http::Handler).
  ScratchUse<http::Request> scratch(request_scratch_, request_busy_);
  http::Request& request = scratch.get();
  const bool reused = scratch.reused();
  request.method.assign(http_call.method);
  request.path.assign(http_call.path);
  request.raw_path.assign(http_call.raw_path);
  request.query.assign(http_call.query);
  request.body.assign(http_call.body);
  request.received_us = info.received_us;
  request.loop_turn = info.loop_turn;
  request.peer = info.peer;
  request.decoded_body = decoded_body;
  if (direct != nullptr && method != nullptr) {
    // The route is known: the router's matching would find it, with this one parameter
    // (non-empty: directCallOf refuses an empty path field).
    const auto& routed = routed_[static_cast<size_t>(method - methodTable().data())];
    if (routed) {
      request.routed_handler = routed->handler;
      request.routed_pattern = routed->route;
      request.params.emplace_back(routed->params.front(), direct->path_value);
    }
  }
  // The headers are written over the reused request's (Request::clear() below keeps them): their
  // strings keep their capacity, so "content-type: application/json", too long for a short
  // string, costs no allocation per call.
  size_t count = 0;
  auto put = [&request, &count](std::string_view name, std::string_view value) {
    if (count < request.headers.size()) {
      request.headers[count].first.assign(name);
      request.headers[count].second.assign(value);
    } else {
      request.headers.emplace_back(name, value);
    }
    ++count;
  };
  request.headers.reserve(info.metadata.size() + 2);
  for (const auto& [name, value] : info.metadata) {
    // gRPC's own headers are the transport's; the route reads JSON.
    if (name == "content-type" || name == "te" || name == "host" || name.rfind("grpc-", 0) == 0) {
      continue;
    }
    put(name, value);
  }
  put("host", info.authority);
  if (!request.body.empty() || decoded_body != nullptr) put("content-type", "application/json");
  request.headers.resize(count);  // fewer than the last call's: the rest go
  guarded_(request, std::move(responder));
  const std::string_view route = request.route;
  if (reused) {
    // A large call's strings are not kept for the next one.
    size_t header_bytes = 0;
    for (const auto& [name, value] : request.headers) header_bytes += name.size() + value.size();
    if (request.body.capacity() + request.path.capacity() + request.raw_path.capacity() +
            request.query.capacity() + header_bytes >
        kKeptCallBytes) {
      request = http::Request();
    } else {
      // Cleared but for the headers, whose strings the next call writes over (read by nobody
      // meanwhile: a route reads its request during its call only, http::Handler).
      std::vector<std::pair<std::string, std::string>> headers = std::move(request.headers);
      request.clear();
      request.headers = std::move(headers);
    }
  }
  return route;
}

void GrpcGateway::startWatch(grpc::CallPtr call, HttpCall http_call) {
  auto watch = std::make_shared<Watch>(call_metrics_);
  watch->call = std::move(call);
  watch->http_call = std::move(http_call);
  watches_.insert(watch);
  // The call's end stops the polling: the gateway lets the watch go (its timer with it).
  watch->call->onCancelled(alive_.guarded([this, weak = std::weak_ptr<Watch>(watch)] {
    if (auto w = weak.lock()) watches_.erase(w);
  }));
  pollWatch(watch);
}

void GrpcGateway::onDraining() {
  // A copy: a poll may answer at once and let its watch go.
  const std::vector<std::shared_ptr<Watch>> open(watches_.begin(), watches_.end());
  for (const auto& watch : open) {
    watch->timer.reset();
    pollWatch(watch);
  }
}

void GrpcGateway::pollWatch(const std::shared_ptr<Watch>& watch) {
  if (!watch->call->active()) {
    watches_.erase(watch);
    return;
  }
  auto probe = std::make_shared<ReadinessProbe>(alive_.guarded(
      [this, weak = std::weak_ptr<Watch>(watch)](int status, std::string body) {
        std::shared_ptr<Watch> w = weak.lock();
        if (!w) return;
        if (w->call->active() && status != 200 && status != 503) {
          finishWithError(*w->call, status, body);
        }
        if (!w->call->active()) {
          watches_.erase(w);
          return;
        }
        const bool serving = status == 200;
        if (w->last_sent != serving) {
          w->last_sent = serving;
          w->call->sendMessage(readinessMessage(serving));
        }
        w->timer.start(scheduler_, options_.health_watch_poll_ms,
                       alive_.guarded([this, weak] {
                         if (auto again = weak.lock()) pollWatch(again);
                       }));
      }));
  dispatch(*watch->call, watch->http_call, std::move(probe));
}

}  // namespace sidelock::api
