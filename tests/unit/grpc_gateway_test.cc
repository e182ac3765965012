// The gRPC gateway as pure logic (src/api/grpc_gateway.h): each method's route, the request message
// -> path and JSON body, the HTTP error -> gRPC status table, JSON answers and NDJSON lines ->
// response messages, cancellation -> client gone, the token and Host headers from the metadata, and
// grpc.health.v1.Health (Check, Watch) from /readyz. A fake ServerCall stands for the transport and a
// fake handler for the guarded router; tests/integration/grpc tests the real thing end to end.
#include "api/grpc_gateway.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/dapr_api.h"
#include "api/election_api.h"
#include "api/lock_api.h"
#include "backend/memory_backend.h"
#include "dapr/proto/runtime/v1/dapr.pb.h"
#include "event/fake_scheduler.h"
#include "grpc/health/v1/health.pb.h"
#include "http/access_policy.h"
#include "http/router.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"
#include "sidelock/v1/locks.pb.h"

namespace sidelock::api {
namespace {

using grpc::StatusCode;
using json = nlohmann::json;
namespace dapr = ::dapr::proto::runtime::v1;
namespace health = ::grpc::health::v1;
namespace v1 = ::sidelock::v1;

class FakeCall : public grpc::ServerCall {
 public:
  explicit FakeCall(std::string method) {
    info_.method = std::move(method);
    info_.authority = "127.0.0.1:50001";
    info_.peer = std::make_shared<http::PeerIdentity>();
  }
  const grpc::CallInfo& info() const override { return info_; }
  bool sendMessage(std::string serialized) override {
    if (!active_) return false;
    messages.push_back(std::move(serialized));
    return true;
  }
  void finish(StatusCode code, std::string_view message) override {
    if (!active_) return;
    active_ = false;
    status = code;
    status_message = std::string(message);
  }
  bool active() const override { return active_; }
  void onCancelled(std::function<void()> cb) override { cancelled_cbs.push_back(std::move(cb)); }
  void cancel() {
    active_ = false;
    for (auto& cb : cancelled_cbs) cb();
  }

  grpc::CallInfo info_;
  std::vector<std::string> messages;
  std::optional<StatusCode> status;
  std::string status_message;
  std::vector<std::function<void()>> cancelled_cbs;

 private:
  bool active_ = true;
};

/// What the fake router saw, and the responder to answer with.
struct Seen {
  http::Request request;  // a copy (headers and body included)
  http::ResponderPtr responder;
  int count = 0;
};

http::Handler recordingHandler(Seen& seen) {
  return [&seen](http::Request& request, http::ResponderPtr responder) {
    request.route = "/v1/locks/{name}/acquire";  // as the router would (metrics label)
    seen.request = request;
    seen.responder = std::move(responder);
    ++seen.count;
  };
}

template <typename M>
M parsed(const std::string& bytes) {
  M m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

TEST(GrpcGatewayTest, EveryMethodOfTheProtosHasARoute) {
  for (const char* name :
       {"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", "/dapr.proto.runtime.v1.Dapr/UnlockAlpha1",
        "/dapr.proto.runtime.v1.Dapr/GetMetadata", "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch"}) {
    EXPECT_NE(findGrpcMethod(name), nullptr) << name;
  }
  // Every method the sidelock.v1 services declare, from their descriptors.
  const auto* file = v1::AcquireRequest::descriptor()->file();
  ASSERT_EQ(file->service_count(), 2);
  for (const auto* service : {file->FindServiceByName("Locks"), file->FindServiceByName("Elections")}) {
    ASSERT_NE(service, nullptr);
    for (int i = 0; i < service->method_count(); ++i) {
      const auto* m = service->method(i);
      const std::string name = "/" + service->full_name() + "/" + m->name();
      const GrpcMethod* method = findGrpcMethod(name);
      ASSERT_NE(method, nullptr) << name;
      EXPECT_EQ(method->request, m->input_type()) << name;
      EXPECT_EQ(method->response, m->output_type()) << name;
    }
  }
  EXPECT_EQ(findGrpcMethod("/dapr.proto.runtime.v1.Dapr/GetState"), nullptr);
  EXPECT_EQ(findGrpcMethod("/sidelock.v1.Locks/acquire"), nullptr);
}

TEST(GrpcGatewayTest, RequestMessageBecomesPathAndJsonBody) {
  v1::AcquireRequest req;
  req.set_name("orders 7/x");
  req.set_ttl_ms(10000);
  req.set_wait_ms(5000);
  req.set_auto_renew(true);
  req.mutable_health()->set_url("http://127.0.0.1:8080/healthz");
  req.mutable_health()->set_grace_ms(3000);
  req.set_lock_delay_ms(2500);
  auto call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), req.SerializeAsString(),
                         std::nullopt);
  ASSERT_TRUE(call.isOk()) << call.status().message();
  EXPECT_EQ(call->method, "POST");
  EXPECT_EQ(call->path, "/v1/locks/orders 7/x/acquire");
  EXPECT_EQ(call->raw_path, "/v1/locks/orders%207%2Fx/acquire");
  const json body = json::parse(call->body);
  EXPECT_EQ(body, json::parse(R"({"ttl_ms": 10000, "wait_ms": 5000, "auto_renew": true,
      "health": {"url": "http://127.0.0.1:8080/healthz", "grace_ms": 3000}, "lock_delay_ms": 2500})"));

  // The deadline caps wait_ms; Hold adds the stream hold.
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Hold"), req.SerializeAsString(),
                    WaitBound{1200});
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(json::parse(call->body)["wait_ms"], 1200);
  EXPECT_EQ(json::parse(call->body)["hold"], "stream");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), req.SerializeAsString(),
                    WaitBound{-5});
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(json::parse(call->body)["wait_ms"], 0);
  // A wait_ms over locks.max_wait_ms is passed on as sent: the route refuses it, deadline or not
  // (cut to the time left, it was accepted and the call granted).
  req.set_wait_ms(1'000'000'000'000);
  for (const char* m : {"/sidelock.v1.Locks/Acquire", "/sidelock.v1.Locks/Hold"}) {
    call = httpCallOf(*findGrpcMethod(m), req.SerializeAsString(), WaitBound{1200, 300'000});
    ASSERT_TRUE(call.isOk());
    EXPECT_EQ(json::parse(call->body)["wait_ms"], 1'000'000'000'000) << m;
  }

  // A GET route has no body; an empty path field is refused before any route runs.
  v1::InspectRequest inspect;
  inspect.set_name("a");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Inspect"), inspect.SerializeAsString(),
                    std::nullopt);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(call->method, "GET");
  EXPECT_EQ(call->path, "/v1/locks/a");
  EXPECT_EQ(call->body, "");
  EXPECT_EQ(call->query, "");

  // Events: a GET whose other fields are the query string (extended only when set).
  v1::EventsRequest events;
  events.set_name("a b");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Events"), events.SerializeAsString(),
                    std::nullopt);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(call->method, "GET");
  EXPECT_EQ(call->raw_path, "/v1/locks/a%20b/events");
  EXPECT_EQ(call->query, "");
  EXPECT_EQ(call->body, "");
  events.set_extended(true);
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Events"), events.SerializeAsString(),
                    std::nullopt);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(call->query, "extended=true");
  EXPECT_EQ(call->body, "");

  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Inspect"), "", std::nullopt);
  ASSERT_FALSE(call.isOk());
  EXPECT_EQ(call.status().code(), sidelock::StatusCode::kInvalidArgument);
  EXPECT_EQ(json::parse(call.status().message())["error"], "bad_request");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), "\xff\xff\xff", std::nullopt);
  ASSERT_FALSE(call.isOk());
  EXPECT_EQ(call.status().code(), sidelock::StatusCode::kInvalidArgument);
}

TEST(GrpcGatewayTest, SidelocksMessagesWithUnknownFieldsAreRefused) {
  // As the HTTP routes refuse an unknown JSON field: a field number this sidecar does not know,
  // or a known field with the wrong wire type (ttl_ms as bytes), which protobuf would keep as
  // unknown and leave ttl_ms at its default.
  v1::AcquireRequest req;
  req.set_name("orders");
  const std::string plain = req.SerializeAsString();
  const std::string unknown_number = plain + std::string("\xf8\x06\x01", 3);  // field 111 = 1
  const std::string wrong_type = plain + std::string("\x12\x01\x35", 3);      // ttl_ms as bytes
  const GrpcMethod& acquire = *findGrpcMethod("/sidelock.v1.Locks/Acquire");
  EXPECT_TRUE(httpCallOf(acquire, plain, std::nullopt).isOk());
  for (const std::string& bytes : {unknown_number, wrong_type}) {
    auto call = httpCallOf(acquire, bytes, std::nullopt);
    ASSERT_FALSE(call.isOk());
    EXPECT_EQ(call.status().code(), sidelock::StatusCode::kInvalidArgument);
    EXPECT_NE(call.status().message().find("does not know"), std::string::npos);
    DirectCall direct;
    EXPECT_FALSE(directCallInto(acquire, bytes, std::nullopt, direct));  // refused the generic way
  }
  DirectCall direct;
  EXPECT_TRUE(directCallInto(acquire, plain, std::nullopt, direct));
  // Nested: HealthBinding with an unknown field.
  v1::AcquireRequest with_health;
  with_health.set_name("orders");
  with_health.mutable_health()->set_url("http://127.0.0.1:8080/ready");
  std::string health = with_health.health().SerializeAsString() + std::string("\xf8\x06\x01", 3);
  std::string nested = plain + std::string("\x62", 1) + static_cast<char>(health.size()) + health;
  EXPECT_FALSE(httpCallOf(acquire, nested, std::nullopt).isOk());
  // Dapr's messages keep protobuf's rule (newer Dapr SDKs may send fields sidelock does not know).
  dapr::TryLockRequest lock;
  lock.set_store_name("s");
  lock.set_resource_id("r");
  lock.set_lock_owner("o");
  lock.set_expiry_in_seconds(10);
  EXPECT_TRUE(httpCallOf(*findGrpcMethod("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"),
                         lock.SerializeAsString() + std::string("\xf8\x06\x01", 3), std::nullopt)
                  .isOk());
}

TEST(GrpcGatewayTest, DaprMessagesUseDaprsJsonNames) {
  dapr::TryLockRequest req;
  req.set_store_name("lockstore");
  req.set_resource_id("orders/42");
  req.set_lock_owner("owner-a");
  req.set_expiry_in_seconds(60);
  auto call = httpCallOf(*findGrpcMethod("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"),
                         req.SerializeAsString(), WaitBound{100});
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(call->path, "/v1.0-alpha1/lock/lockstore");
  EXPECT_EQ(json::parse(call->body),
            json::parse(R"({"resourceId": "orders/42", "lockOwner": "owner-a",
                            "expiryInSeconds": 60})"));
  auto unlock = responseMessageOf(dapr::UnlockResponse::descriptor(), R"({"status": 2})");
  ASSERT_TRUE(unlock.isOk());
  EXPECT_EQ(parsed<dapr::UnlockResponse>(*unlock).status(),
            dapr::UnlockResponse::LOCK_BELONGS_TO_OTHERS);
  auto meta = responseMessageOf(dapr::GetMetadataResponse::descriptor(), R"({"id": "app",
      "runtimeVersion": "sidelock 1", "enabledFeatures": [], "actors": [],
      "components": [{"name": "lockstore", "type": "lock.redis", "version": "v1",
                      "capabilities": []}], "extended": {"runtime": "sidelock"}})");
  ASSERT_TRUE(meta.isOk()) << meta.status().message();
  const auto m = parsed<dapr::GetMetadataResponse>(*meta);
  EXPECT_EQ(m.id(), "app");
  ASSERT_EQ(m.registered_components_size(), 1);
  EXPECT_EQ(m.registered_components(0).type(), "lock.redis");
  EXPECT_EQ(m.extended_metadata().at("runtime"), "sidelock");
}

// A call's wait ends a tenth of its deadline early (5 to 50 ms), so that a lock still held
// answers ABORTED before the deadline's timer ends the call, also on a loaded machine.
TEST(GrpcGatewayTest, AWaitEndsATenthOfTheDeadlineEarly) {
  EXPECT_EQ(answerRoomMs(0), 5);
  EXPECT_EQ(answerRoomMs(20), 5) << "never under 5 ms";
  EXPECT_EQ(answerRoomMs(270), 27);
  EXPECT_EQ(answerRoomMs(900), 50) << "never over 50 ms";
  EXPECT_EQ(answerRoomMs(60'000), 50);
}

TEST(GrpcGatewayTest, HttpErrorsMapToGrpcStatusesOneToOne) {
  EXPECT_EQ(grpcStatusOf(400, "bad_request"), StatusCode::kInvalidArgument);
  EXPECT_EQ(grpcStatusOf(400, "invalid_name"), StatusCode::kInvalidArgument);
  EXPECT_EQ(grpcStatusOf(401, "token_required"), StatusCode::kUnauthenticated);
  EXPECT_EQ(grpcStatusOf(401, "invalid_token"), StatusCode::kUnauthenticated);
  EXPECT_EQ(grpcStatusOf(403, "lock_not_allowed"), StatusCode::kPermissionDenied);
  EXPECT_EQ(grpcStatusOf(403, "ERR_PERMISSION_DENIED"), StatusCode::kPermissionDenied);
  EXPECT_EQ(grpcStatusOf(404, "not_found"), StatusCode::kNotFound);
  EXPECT_EQ(grpcStatusOf(409, "locked"), StatusCode::kAborted);
  EXPECT_EQ(grpcStatusOf(409, "no_permits"), StatusCode::kAborted);
  EXPECT_EQ(grpcStatusOf(409, "not_owner"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(grpcStatusOf(409, "limit_mismatch"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(grpcStatusOf(410, "lease_lost"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(grpcStatusOf(413, "payload_too_large"), StatusCode::kResourceExhausted);
  EXPECT_EQ(grpcStatusOf(429, "too_many_waiters"), StatusCode::kResourceExhausted);
  EXPECT_EQ(grpcStatusOf(421, "host_not_allowed"), StatusCode::kPermissionDenied);
  EXPECT_EQ(grpcStatusOf(503, "backend_unavailable"), StatusCode::kUnavailable);
  EXPECT_EQ(grpcStatusOf(503, "shutting_down"), StatusCode::kUnavailable);
  EXPECT_EQ(grpcStatusOf(504, ""), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(grpcStatusOf(500, "ERR_TRY_LOCK"), StatusCode::kInternal);
  // UNAVAILABLE as its HTTP 503 says: most error replies pass (LOADING, BUSY, MASTERDOWN,
  // CLUSTERDOWN, READONLY after a failover), an ACL's NOPERM does not (the message quotes Redis).
  EXPECT_EQ(grpcStatusOf(503, "backend_error"), StatusCode::kUnavailable);
  EXPECT_EQ(grpcStatusOf(501, "not_implemented"), StatusCode::kUnimplemented);
}

TEST(GrpcGatewayTest, UnaryCallRunsTheRouteWithTheCallsMetadata) {
  event::FakeScheduler scheduler;
  metrics::Metrics metrics("test");
  Seen seen;
  GrpcGateway gateway(scheduler, &metrics, recordingHandler(seen));
  auto call = std::make_shared<FakeCall>("/sidelock.v1.Locks/Acquire");
  call->info_.received_us = scheduler.nowUs();
  call->info_.metadata = {{"authorization", "Bearer t1"},
                          {"dapr-api-token", "t1"},
                          {"content-type", "application/grpc"},
                          {"grpc-timeout", "5S"},
                          {"user-agent", "grpc-node-js/1.14"}};
  call->info_.loop_turn = 7;
  v1::AcquireRequest req;
  req.set_name("orders");
  req.set_ttl_ms(1000);
  gateway.handle(call, req.SerializeAsString());
  ASSERT_EQ(seen.count, 1);
  EXPECT_EQ(seen.request.path, "/v1/locks/orders/acquire");
  EXPECT_EQ(seen.request.header("authorization"), "Bearer t1");
  EXPECT_EQ(seen.request.header("dapr-api-token"), "t1");
  EXPECT_EQ(seen.request.header("host"), "127.0.0.1:50001");
  EXPECT_EQ(seen.request.header("content-type"), "application/json");
  EXPECT_EQ(seen.request.header("grpc-timeout"), "");
  EXPECT_EQ(seen.request.loop_turn, 7u);
  EXPECT_EQ(seen.request.peer, call->info_.peer);
  EXPECT_TRUE(seen.responder->clientConnected());

  seen.responder->send(200, "application/json",
                       R"({"name":"orders","owner":"o1","token":42,"ttl_ms":1000,"new":1})");
  ASSERT_EQ(call->status, StatusCode::kOk);
  ASSERT_EQ(call->messages.size(), 1u);
  const auto grant = parsed<v1::Grant>(call->messages[0]);
  EXPECT_EQ(grant.owner(), "o1");
  EXPECT_EQ(grant.token(), 42);
  EXPECT_EQ(grant.ttl_ms(), 1000);
  EXPECT_FALSE(seen.responder->clientConnected());
  // Counted as HTTP requests are, under the route it ran, with protocol "grpc".
  EXPECT_EQ(metrics.httpRequests("/v1/locks/{name}/acquire", 200, "grpc").Value(), 1);
  EXPECT_EQ(metrics.httpRequests("/v1/locks/{name}/acquire", 200, "http").Value(), 0);
  EXPECT_NE(metrics.render().find("sidelock_http_request_seconds_count{protocol=\"grpc\","
                                  "route=\"/v1/locks/{name}/acquire\"} 1"),
            std::string::npos);
}

TEST(GrpcGatewayTest, HttpErrorBecomesStatusWithTheErrorBody) {
  event::FakeScheduler scheduler;
  Seen seen;
  GrpcGateway gateway(scheduler, nullptr, recordingHandler(seen));
  auto call = std::make_shared<FakeCall>("/sidelock.v1.Locks/Acquire");
  v1::AcquireRequest req;
  req.set_name("orders");
  gateway.handle(call, req.SerializeAsString());
  ASSERT_EQ(seen.count, 1);
  seen.responder->send(409, "application/json",
                       R"({"error":"locked","message":"held","retry_after_ms":120,"holder":"h"})");
  EXPECT_EQ(call->status, StatusCode::kAborted);
  EXPECT_TRUE(call->messages.empty());
  const json message = json::parse(call->status_message);
  EXPECT_EQ(message["error"], "locked");
  EXPECT_EQ(message["retry_after_ms"], 120);
  EXPECT_EQ(message["holder"], "h");
}

TEST(GrpcGatewayTest, StreamLinesBecomeMessagesAndCancelIsClientGone) {
  event::FakeScheduler scheduler;
  Seen seen;
  GrpcGateway gateway(scheduler, nullptr, recordingHandler(seen));
  auto call = std::make_shared<FakeCall>("/sidelock.v1.Locks/Hold");
  v1::AcquireRequest req;
  req.set_name("orders");
  gateway.handle(call, req.SerializeAsString());
  ASSERT_EQ(seen.count, 1);
  EXPECT_EQ(json::parse(seen.request.body)["hold"], "stream");
  bool gone = false;
  seen.responder->onClientGone([&] { gone = true; });
  seen.responder->startStream(200, "application/x-ndjson");
  EXPECT_TRUE(seen.responder->writeChunk(R"({"event":"acquired","name":"orders","tok)"));
  EXPECT_TRUE(call->messages.empty());  // half a line: nothing yet
  EXPECT_TRUE(seen.responder->writeChunk("en\":5,\"ttl_ms\":900}\n{\"event\":\"renewed\"}\n"));
  ASSERT_EQ(call->messages.size(), 2u);
  EXPECT_EQ(parsed<v1::HoldEvent>(call->messages[0]).event(), "acquired");
  EXPECT_EQ(parsed<v1::HoldEvent>(call->messages[0]).token(), 5);
  EXPECT_EQ(parsed<v1::HoldEvent>(call->messages[1]).event(), "renewed");
  call->cancel();
  EXPECT_TRUE(gone);
  EXPECT_FALSE(seen.responder->writeChunk("{\"event\":\"renewed\"}\n"));
  EXPECT_FALSE(seen.responder->clientConnected());

  // A stream the route ends finishes the call OK.
  auto call2 = std::make_shared<FakeCall>("/sidelock.v1.Elections/Observe");
  v1::ElectionRequest observe;
  observe.set_name("e");
  gateway.handle(call2, observe.SerializeAsString());
  EXPECT_EQ(seen.request.path, "/v1/elections/e/observe");
  seen.responder->startStream(200, "application/x-ndjson");
  seen.responder->writeChunk("{\"event\":\"no_leader\",\"name\":\"e\"}\n");
  seen.responder->endStream();
  EXPECT_EQ(call2->status, StatusCode::kOk);
  EXPECT_EQ(call2->messages.size(), 1u);
}

TEST(GrpcGatewayTest, UnknownMethodsAndBadMessagesNeverReachARoute) {
  event::FakeScheduler scheduler;
  Seen seen;
  GrpcGateway gateway(scheduler, nullptr, recordingHandler(seen));
  auto call = std::make_shared<FakeCall>("/dapr.proto.runtime.v1.Dapr/GetState");
  gateway.handle(call, "");
  // The access rules still apply: the call runs a path no route has; the router's 404 is
  // UNIMPLEMENTED.
  ASSERT_EQ(seen.count, 1);
  EXPECT_EQ(seen.request.path, "/.grpc/unknown-method");
  seen.responder->send(404, "application/json", R"({"error":"not_found","message":"no route"})");
  EXPECT_EQ(call->status, StatusCode::kUnimplemented);
  EXPECT_NE(call->status_message.find("sidelock does not implement"), std::string::npos);
  call = std::make_shared<FakeCall>("/dapr.proto.runtime.v1.Dapr/GetState");
  gateway.handle(call, "");
  seen.responder->send(401, "application/json", R"({"error":"token_required","message":"x"})");
  EXPECT_EQ(call->status, StatusCode::kUnauthenticated);
  call = std::make_shared<FakeCall>("/sidelock.v1.Locks/Release");
  gateway.handle(call, "");  // no name
  EXPECT_EQ(call->status, StatusCode::kInvalidArgument);
  EXPECT_EQ(seen.count, 2);
}

TEST(GrpcGatewayTest, HealthCheckAndWatchFollowReadyz) {
  event::FakeScheduler scheduler;
  int ready_status = 200;
  int probes = 0;
  GrpcGateway gateway(scheduler, nullptr,
                      [&](http::Request& request, http::ResponderPtr responder) {
                        EXPECT_EQ(request.path, "/readyz");
                        ++probes;
                        responder->send(ready_status, "application/json", "{}");
                      },
                      GrpcGateway::Options{.health_watch_poll_ms = 1000});
  using Response = health::HealthCheckResponse;
  health::HealthCheckRequest check;
  auto call = std::make_shared<FakeCall>("/grpc.health.v1.Health/Check");
  gateway.handle(call, check.SerializeAsString());
  ASSERT_EQ(call->messages.size(), 1u);
  EXPECT_EQ(parsed<Response>(call->messages[0]).status(), Response::SERVING);
  ready_status = 503;
  check.set_service("sidelock.v1.Locks");
  call = std::make_shared<FakeCall>("/grpc.health.v1.Health/Check");
  gateway.handle(call, check.SerializeAsString());
  EXPECT_EQ(parsed<Response>(call->messages.at(0)).status(), Response::NOT_SERVING);
  check.set_service("no.such.Service");
  call = std::make_shared<FakeCall>("/grpc.health.v1.Health/Check");
  gateway.handle(call, check.SerializeAsString());
  EXPECT_EQ(call->status, StatusCode::kNotFound);

  check.set_service("");
  auto watch = std::make_shared<FakeCall>("/grpc.health.v1.Health/Watch");
  gateway.handle(watch, check.SerializeAsString());
  ASSERT_EQ(watch->messages.size(), 1u);
  EXPECT_EQ(parsed<Response>(watch->messages[0]).status(), Response::NOT_SERVING);
  scheduler.advanceMs(1000);  // unchanged: nothing sent
  EXPECT_EQ(watch->messages.size(), 1u);
  ready_status = 200;
  scheduler.advanceMs(1000);
  ASSERT_EQ(watch->messages.size(), 2u);
  EXPECT_EQ(parsed<Response>(watch->messages[1]).status(), Response::SERVING);
  EXPECT_TRUE(watch->active());
  const int before = probes;
  watch->cancel();
  scheduler.advanceMs(5000);
  EXPECT_EQ(probes, before);  // the watch stopped looking
  EXPECT_EQ(scheduler.pendingTimers(), 0u);

  // A refused probe (say 401 token_required) ends the watch with that status.
  ready_status = 401;
  watch = std::make_shared<FakeCall>("/grpc.health.v1.Health/Watch");
  gateway.handle(watch, check.SerializeAsString());
  EXPECT_EQ(watch->status, StatusCode::kUnauthenticated);
}

/// The gateway over the real routes (LockApi, DaprApi, ElectionApi on a MemoryBackend), behind the
/// real access policy: every sidelock.v1 message is accepted by its route's strict JSON body
/// parser, and every answer converts back.
/// A sidecar's API on the memory backend behind a gateway: the real routes, guarded by a token
/// policy. `direct_calls` false: every call takes the JSON bridge.
struct World {
  explicit World(bool direct_calls = true, bool dapr = true) {
    svc = std::make_unique<lock::LockService>(cfg, backend, sched, metrics);
    lock_api = std::make_unique<LockApi>(cfg, *svc, metrics, sched);
    dapr_cfg.enabled = dapr;
    dapr_cfg.stores = {"lockstore"};
    dapr_api = std::make_unique<DaprApi>(dapr_cfg, cfg, *svc, [] { return std::string(); });
    elections = std::make_unique<ElectionApi>(cfg, *svc, *lock_api, metrics, sched,
                                              ElectionApi::Options{.identity = "pod-a"});
    for (std::vector<Route> routes : {lock_api->routes(), dapr_api->routes(), elections->routes()}) {
      for (auto& r : routes) EXPECT_TRUE(router.add(r.method, r.pattern, std::move(r.handler)).isOk());
    }
    verifier.replace({TokenEntry{"tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA", {}, "t1"},
                      TokenEntry{"tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBB", {"orders~"}, "t2"}});
    policy.tokens = &verifier;
    GrpcGateway::Options options;
    options.direct_calls = direct_calls;
    options.router = &router;
    gateway = std::make_unique<GrpcGateway>(
        sched, &metrics, http::guardHandler(policy, policy, router.asHandler()), options);
  }
  ~World() {
    gateway.reset();
    elections.reset();
    sched.advanceMs(100);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  /// Runs one call to its end (or until `max_ms` passed) and returns it.
  std::shared_ptr<FakeCall> call(std::string method, const google::protobuf::Message& request,
                                 std::string token = "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                                 int64_t max_ms = 50) {
    return callBytes(std::move(method), request.SerializeAsString(), std::move(token), max_ms);
  }
  std::shared_ptr<FakeCall> callBytes(std::string method, const std::string& bytes,
                                      std::string token = "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                                      int64_t max_ms = 50,
                                      std::optional<int64_t> deadline_ms = std::nullopt) {
    auto c = std::make_shared<FakeCall>(std::move(method));
    c->info_.metadata = {{"authorization", "Bearer " + token}};
    c->info_.received_us = sched.nowUs();
    if (deadline_ms) c->info_.deadline_us = sched.nowUs() + *deadline_ms * 1000;
    c->info_.peer = std::make_shared<http::PeerIdentity>(http::PeerIdentity{
        .transport = http::PeerIdentity::Transport::kTcp, .address = "127.0.0.1", .port = 5555});
    gateway->handle(c, bytes);
    for (int64_t t = 0; t < max_ms && c->active(); ++t) sched.advanceMs(1);
    return c;
  }

  config::LocksConfig cfg;
  config::DaprConfig dapr_cfg;
  event::FakeScheduler sched;
  backend::MemoryBackend backend{sched};
  metrics::Metrics metrics;
  std::unique_ptr<lock::LockService> svc;
  std::unique_ptr<LockApi> lock_api;
  std::unique_ptr<DaprApi> dapr_api;
  std::unique_ptr<ElectionApi> elections;
  http::Router router;
  http::TokenVerifier verifier;
  http::ListenerPolicy policy;
  std::unique_ptr<GrpcGateway> gateway;
};

class GrpcOverRealRoutesTest : public ::testing::Test, protected World {};

// With dapr.enabled false the Dapr routes are off: Dapr's methods answer UNIMPLEMENTED, as a method
// sidelock does not serve, saying why (they answered NOT_FOUND naming the internal route), after
// the access rules, and counted as unmatched; sidelock's own methods are unchanged.
TEST(GrpcDaprOffTest, DaprsMethodsAreUnimplementedWhenDaprIsOff) {
  World w(/*direct_calls=*/true, /*dapr=*/false);
  dapr::TryLockRequest lock;
  lock.set_store_name("lockstore");
  lock.set_resource_id("r1");
  lock.set_lock_owner("me");
  lock.set_expiry_in_seconds(10);
  for (const char* method :
       {"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", "/dapr.proto.runtime.v1.Dapr/GetMetadata"}) {
    SCOPED_TRACE(method);
    auto c = w.call(method, lock);
    EXPECT_EQ(c->status, StatusCode::kUnimplemented);
    EXPECT_NE(c->status_message.find("dapr.enabled"), std::string::npos) << c->status_message;
    EXPECT_EQ(c->status_message.find("/v1.0"), std::string::npos) << c->status_message;
    c = w.call(method, lock, "tokenWRONGWRONGWRONGWRONGWRONGWRON");
    EXPECT_EQ(c->status, StatusCode::kUnauthenticated) << "access control first";
  }
  v1::AcquireRequest acquire;
  acquire.set_name("r1");
  EXPECT_EQ(w.call("/sidelock.v1.Locks/Acquire", acquire)->status, StatusCode::kOk);
}

// The direct methods' routes are exclusive in the real route table, so their calls skip the
// router's matching (GrpcGateway::Options::router); the comparisons with the bridge below then
// check that skipping it changes nothing.
TEST_F(GrpcOverRealRoutesTest, DirectMethodsRoutesAreExclusive) {
  for (const char* name :
       {"/sidelock.v1.Locks/Acquire", "/sidelock.v1.Locks/Release", "/sidelock.v1.Locks/Extend",
        "/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", "/dapr.proto.runtime.v1.Dapr/UnlockAlpha1"}) {
    const GrpcMethod* method = findGrpcMethod(name);
    ASSERT_NE(method, nullptr) << name;
    EXPECT_NE(method->direct, GrpcMethod::Direct::kNone) << name;
    EXPECT_TRUE(router.exclusiveRoute(method->http_method, method->path)) << name;
  }
}

// A direct call the guard refuses is counted as unmatched, as the same refusal over HTTP/1.1 is:
// its route is known to the gateway but not taken.
TEST_F(GrpcOverRealRoutesTest, ARefusedDirectCallIsCountedUnmatched) {
  v1::AcquireRequest request;
  request.set_name("refused");
  request.set_ttl_ms(5000);
  auto refused = call("/sidelock.v1.Locks/Acquire", request, "not-a-valid-token");
  ASSERT_TRUE(refused->status.has_value());
  EXPECT_EQ(*refused->status, StatusCode::kUnauthenticated);
  EXPECT_EQ(metrics.httpRequests(http::kUnmatchedRoute, 401, "grpc").Value(), 1);
  EXPECT_EQ(metrics.httpRequests("/v1/locks/{name}/acquire", 401, "grpc").Value(), 0);
  auto granted = call("/sidelock.v1.Locks/Acquire", request);
  ASSERT_TRUE(granted->status.has_value());
  EXPECT_EQ(*granted->status, StatusCode::kOk);
  EXPECT_EQ(metrics.httpRequests("/v1/locks/{name}/acquire", 200, "grpc").Value(), 1);
}

TEST_F(GrpcOverRealRoutesTest, EveryLocksMethodRunsItsRoute) {
  v1::AcquireRequest acquire;
  acquire.set_name("orders");
  acquire.set_ttl_ms(10000);
  acquire.set_holder("worker-1");
  acquire.mutable_health()->set_url("http://127.0.0.1:1/healthz");
  acquire.clear_health();
  auto c = call("/sidelock.v1.Locks/Acquire", acquire);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  const auto grant = parsed<v1::Grant>(c->messages.at(0));
  EXPECT_GT(grant.token(), 0);
  EXPECT_EQ(grant.ttl_ms(), 10000);
  c = call("/sidelock.v1.Locks/Acquire", acquire);
  EXPECT_EQ(c->status, StatusCode::kAborted);
  EXPECT_EQ(json::parse(c->status_message)["error"], "locked") << c->status_message;

  v1::InspectRequest inspect;
  inspect.set_name("orders");
  c = call("/sidelock.v1.Locks/Inspect", inspect);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_TRUE(parsed<v1::LockState>(c->messages.at(0)).held());

  v1::ExtendRequest extend;
  extend.set_name("orders");
  extend.set_owner(grant.owner());
  extend.set_ttl_ms(20000);
  c = call("/sidelock.v1.Locks/Extend", extend);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_EQ(parsed<v1::Extended>(c->messages.at(0)).ttl_ms(), 20000);

  v1::ReleaseRequest release;
  release.set_name("orders");
  release.set_owner("not-the-owner");
  c = call("/sidelock.v1.Locks/Release", release);
  EXPECT_EQ(c->status, StatusCode::kFailedPrecondition) << c->status_message;
  release.set_owner(grant.owner());
  c = call("/sidelock.v1.Locks/Release", release);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_TRUE(parsed<v1::Released>(c->messages.at(0)).released());

  v1::SemaphoreAcquireRequest sem;
  sem.set_name("pool");
  sem.set_limit(1);
  c = call("/sidelock.v1.Locks/AcquirePermit", sem);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  const auto permit = parsed<v1::Permit>(c->messages.at(0));
  EXPECT_FALSE(permit.permit().empty());
  c = call("/sidelock.v1.Locks/AcquirePermit", sem);
  EXPECT_EQ(c->status, StatusCode::kAborted) << c->status_message;
  c = call("/sidelock.v1.Locks/InspectSemaphore", inspect);  // "orders": no semaphore there
  EXPECT_EQ(c->status, StatusCode::kOk) << c->status_message;
  inspect.set_name("pool");
  c = call("/sidelock.v1.Locks/InspectSemaphore", inspect);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_EQ(parsed<v1::SemaphoreState>(c->messages.at(0)).used(), 1);
  v1::PermitExtendRequest pext;
  pext.set_name("pool");
  pext.set_permit(permit.permit());
  pext.set_ttl_ms(5000);
  c = call("/sidelock.v1.Locks/ExtendPermit", pext);
  EXPECT_EQ(c->status, StatusCode::kOk) << c->status_message;
  v1::PermitRequest prel;
  prel.set_name("pool");
  prel.set_permit(permit.permit());
  c = call("/sidelock.v1.Locks/ReleasePermit", prel);
  EXPECT_EQ(c->status, StatusCode::kOk) << c->status_message;

  v1::MultiAcquireRequest multi;
  multi.add_names("b");
  multi.add_names("a");
  multi.set_ttl_ms(5000);
  c = call("/sidelock.v1.Locks/AcquireMulti", multi);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  const auto mg = parsed<v1::MultiGrant>(c->messages.at(0));
  ASSERT_EQ(mg.leases_size(), 2);
  EXPECT_EQ(mg.names(0), "a");
  v1::MultiReleaseRequest mrel;
  mrel.add_names("a");
  mrel.add_names("b");
  mrel.set_owner(mg.owner());
  c = call("/sidelock.v1.Locks/ReleaseMulti", mrel);
  EXPECT_EQ(c->status, StatusCode::kOk) << c->status_message;

  // Bad input: the route's own errors.
  acquire.set_name("bad name");
  c = call("/sidelock.v1.Locks/Acquire", acquire);
  EXPECT_EQ(c->status, StatusCode::kInvalidArgument) << c->status_message;
  acquire.set_name("x");
  acquire.set_ttl_ms(int64_t{1} << 40);
  c = call("/sidelock.v1.Locks/Acquire", acquire);
  EXPECT_EQ(c->status, StatusCode::kInvalidArgument) << c->status_message;
  EXPECT_GT(metrics.httpRequests("/v1/locks/{name}/acquire", 200, "grpc").Value(), 0);
}

TEST_F(GrpcOverRealRoutesTest, HoldIsHeldWhileTheCallIsOpen) {
  v1::AcquireRequest acquire;
  acquire.set_name("streamed");
  acquire.set_ttl_ms(3000);
  auto hold = call("/sidelock.v1.Locks/Hold", acquire);
  ASSERT_TRUE(hold->active()) << hold->status_message;
  ASSERT_EQ(hold->messages.size(), 1u);
  const auto first = parsed<v1::HoldEvent>(hold->messages[0]);
  EXPECT_EQ(first.event(), "acquired");
  EXPECT_GT(first.token(), 0);
  v1::InspectRequest inspect;
  inspect.set_name("streamed");
  EXPECT_TRUE(parsed<v1::LockState>(call("/sidelock.v1.Locks/Inspect", inspect)->messages.at(0)).held());
  sched.advanceMs(2000);  // renewed by the watchdog
  EXPECT_GE(hold->messages.size(), 2u);
  hold->cancel();
  sched.advanceMs(50);
  EXPECT_FALSE(parsed<v1::LockState>(call("/sidelock.v1.Locks/Inspect", inspect)->messages.at(0)).held());
}

TEST_F(GrpcOverRealRoutesTest, DeadlineCutsTheWait) {
  v1::AcquireRequest acquire;
  acquire.set_name("busy");
  acquire.set_ttl_ms(60000);
  ASSERT_EQ(call("/sidelock.v1.Locks/Acquire", acquire)->status, StatusCode::kOk);
  acquire.set_wait_ms(30000);
  auto c = std::make_shared<FakeCall>("/sidelock.v1.Locks/Acquire");
  c->info_.metadata = {{"dapr-api-token", "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}};
  c->info_.deadline_us = sched.nowUs() + 500'000;
  gateway->handle(c, acquire.SerializeAsString());
  sched.advanceMs(400);
  EXPECT_TRUE(c->active());
  for (int t = 0; t < 300 && c->active(); ++t) sched.advanceMs(1);
  EXPECT_EQ(c->status, StatusCode::kAborted) << "the route gave up at the deadline";
}

TEST_F(GrpcOverRealRoutesTest, TokensAndScopes) {
  v1::AcquireRequest acquire;
  acquire.set_name("invoices~1");
  EXPECT_EQ(call("/sidelock.v1.Locks/Acquire", acquire, "")->status, StatusCode::kUnauthenticated);
  EXPECT_EQ(call("/sidelock.v1.Locks/Acquire", acquire, "wrongwrongwrongwrongwrongwrong")->status,
            StatusCode::kUnauthenticated);
  auto c = call("/sidelock.v1.Locks/Acquire", acquire, "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBB");
  EXPECT_EQ(c->status, StatusCode::kPermissionDenied) << c->status_message;
  acquire.set_name("orders~1");
  c = call("/sidelock.v1.Locks/Acquire", acquire, "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBB");
  EXPECT_EQ(c->status, StatusCode::kOk) << c->status_message;
  // Health needs no token, as /readyz.
  health::HealthCheckRequest check;
  c = call("/grpc.health.v1.Health/Check", check, "");
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_EQ(parsed<health::HealthCheckResponse>(c->messages.at(0)).status(),
            health::HealthCheckResponse::SERVING);
}

TEST_F(GrpcOverRealRoutesTest, DaprLockMethodsAndMetadata) {
  dapr::TryLockRequest lock;
  lock.set_store_name("lockstore");
  lock.set_resource_id("orders/42");
  lock.set_lock_owner("owner-a");
  lock.set_expiry_in_seconds(60);
  auto c = call("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", lock);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_TRUE(parsed<dapr::TryLockResponse>(c->messages.at(0)).success());
  lock.set_lock_owner("owner-b");
  c = call("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", lock);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_FALSE(parsed<dapr::TryLockResponse>(c->messages.at(0)).success());
  dapr::UnlockRequest unlock;
  unlock.set_store_name("lockstore");
  unlock.set_resource_id("orders/42");
  unlock.set_lock_owner("owner-b");
  c = call("/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", unlock);
  EXPECT_EQ(parsed<dapr::UnlockResponse>(c->messages.at(0)).status(),
            dapr::UnlockResponse::LOCK_BELONGS_TO_OTHERS);
  unlock.set_lock_owner("owner-a");
  c = call("/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", unlock);
  EXPECT_EQ(parsed<dapr::UnlockResponse>(c->messages.at(0)).status(), dapr::UnlockResponse::SUCCESS);
  c = call("/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", unlock);
  EXPECT_EQ(parsed<dapr::UnlockResponse>(c->messages.at(0)).status(),
            dapr::UnlockResponse::LOCK_DOES_NOT_EXIST);
  lock.set_store_name("nostore");
  c = call("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", lock);
  EXPECT_EQ(c->status, StatusCode::kInvalidArgument) << c->status_message;
  EXPECT_EQ(json::parse(c->status_message)["errorCode"], "ERR_LOCK_STORE_NOT_FOUND");
  c = call("/dapr.proto.runtime.v1.Dapr/GetMetadata", dapr::GetMetadataRequest());
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  const auto meta = parsed<dapr::GetMetadataResponse>(c->messages.at(0));
  EXPECT_EQ(meta.registered_components_size(), 1);
  EXPECT_FALSE(meta.runtime_version().empty());
}

TEST_F(GrpcOverRealRoutesTest, ElectionMethods) {
  v1::CampaignRequest campaign;
  campaign.set_name("leader");
  campaign.set_candidate("c1");
  campaign.set_value("v1");
  campaign.set_ttl_ms(3000);
  auto stream = call("/sidelock.v1.Elections/Campaign", campaign);
  ASSERT_TRUE(stream->active()) << stream->status_message;
  ASSERT_GE(stream->messages.size(), 1u);
  const auto elected = parsed<v1::CampaignEvent>(stream->messages[0]);
  EXPECT_EQ(elected.event(), "elected");
  v1::ElectionRequest er;
  er.set_name("leader");
  auto c = call("/sidelock.v1.Elections/Leader", er);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_EQ(parsed<v1::ElectionState>(c->messages.at(0)).leader().candidate(), "c1");
  auto observe = call("/sidelock.v1.Elections/Observe", er);
  ASSERT_GE(observe->messages.size(), 1u) << observe->status_message;
  EXPECT_EQ(parsed<v1::ObserveEvent>(observe->messages[0]).event(), "leader");
  v1::ProclaimRequest proclaim;
  proclaim.set_name("leader");
  proclaim.set_owner(elected.owner());
  proclaim.set_value("v2");
  c = call("/sidelock.v1.Elections/Proclaim", proclaim);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_EQ(parsed<v1::Proclaimed>(c->messages.at(0)).term(), elected.term());
  v1::ResignRequest resign;
  resign.set_name("leader");
  resign.set_owner(elected.owner());
  c = call("/sidelock.v1.Elections/Resign", resign);
  ASSERT_EQ(c->status, StatusCode::kOk) << c->status_message;
  EXPECT_TRUE(parsed<v1::Resigned>(c->messages.at(0)).resigned());
  observe->cancel();
  stream->cancel();
  sched.advanceMs(50);
}

/// One scripted call, run the same way on two sidecars.
struct Step {
  Step(std::string m, std::string b) : method(std::move(m)), bytes(std::move(b)) {}
  std::string method;
  std::string bytes;
  std::string token = "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
  int64_t max_ms = 50;
  std::optional<int64_t> deadline_ms;
};

Step acquireStep(const std::string& name, const std::string& owner,
                 const std::function<void(v1::AcquireRequest&)>& more = {}) {
  v1::AcquireRequest m;
  m.set_name(name);
  m.set_owner(owner);
  m.set_ttl_ms(10000);
  if (more) more(m);
  return {"/sidelock.v1.Locks/Acquire", m.SerializeAsString()};
}

Step releaseStep(const std::string& name, const std::string& owner) {
  v1::ReleaseRequest m;
  m.set_name(name);
  m.set_owner(owner);
  return {"/sidelock.v1.Locks/Release", m.SerializeAsString()};
}

Step extendStep(const std::string& name, const std::string& owner, int64_t ttl_ms,
                const std::string& mode = "") {
  v1::ExtendRequest m;
  m.set_name(name);
  m.set_owner(owner);
  m.set_ttl_ms(ttl_ms);
  m.set_mode(mode);
  return {"/sidelock.v1.Locks/Extend", m.SerializeAsString()};
}

Step tryLockStep(const std::string& store, const std::string& resource, const std::string& owner,
                 int32_t expiry) {
  dapr::TryLockRequest m;
  m.set_store_name(store);
  m.set_resource_id(resource);
  m.set_lock_owner(owner);
  m.set_expiry_in_seconds(expiry);
  return {"/dapr.proto.runtime.v1.Dapr/TryLockAlpha1", m.SerializeAsString()};
}

Step unlockStep(const std::string& store, const std::string& resource, const std::string& owner) {
  dapr::UnlockRequest m;
  m.set_store_name(store);
  m.set_resource_id(resource);
  m.set_lock_owner(owner);
  return {"/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", m.SerializeAsString()};
}

// The direct path (request message -> the route's fields, flat answer -> response message) answers
// every call exactly as the JSON bridge does: same status, same message (errors included), same
// response bytes, on two sidecars run through the same script.
TEST(GrpcDirectPathTest, AnswersExactlyAsTheJsonBridge) {
  World direct(true);
  World bridge(false);
  const int64_t big = std::numeric_limits<int64_t>::max();
  std::vector<Step> script = {
      acquireStep("a", "o1", [](auto& m) { m.set_holder("worker-1"); }),
      acquireStep("a", "o2"),  // locked, with retry_after_ms
      acquireStep("a", "o3", [](auto& m) { m.set_wait_ms(30); }),
      acquireStep("a", "o4", [](auto& m) { m.set_wait_ms(5000); }),  // capped by the deadline
      acquireStep("b", "o1", [](auto& m) { m.set_ttl_ms(-5); }),
      acquireStep("b", "o1", [](auto& m) { m.set_ttl_ms(big); }),
      acquireStep("b", "o1", [&](auto& m) { m.set_wait_ms(big); }),
      acquireStep("b", "o1", [](auto& m) { m.set_max_hold_ms(-1); }),
      acquireStep("b", "o1",
                  [](auto& m) { m.set_lock_delay_ms(std::numeric_limits<int64_t>::min()); }),
      acquireStep("b", "o1",
                  [](auto& m) {
                    m.set_mode("shared");
                    m.set_reentrant(true);
                  }),
      acquireStep("b", "o1",
                  [](auto& m) {
                    m.set_mode("shared");
                    m.set_fair(true);
                  }),
      acquireStep("b", "o1",
                  [](auto& m) {
                    m.set_mode("shared");
                    m.set_lock_delay_ms(10);
                  }),
      acquireStep("b", "o1", [](auto& m) { m.set_mode("sideways"); }),
      acquireStep("b", "", [](auto& m) { m.set_request_id("bad id with spaces"); }),
      acquireStep("b", std::string(300, 'o')),
      acquireStep("bad name!", "o1"),
      acquireStep("", "o1"),  // the bridge's own error
      acquireStep("orders 7/ü", "ö1", [](auto& m) { m.set_holder("h\"\\\n"); }),
      acquireStep("c", "o1", [](auto& m) { m.set_request_id("r1"); }),
      acquireStep("c", "o1", [](auto& m) { m.set_request_id("r1"); }),  // the replay
      acquireStep("d", "o1", [](auto& m) { m.set_reentrant(true); }),
      acquireStep("d", "o1", [](auto& m) { m.set_reentrant(true); }),
      releaseStep("d", "o1"),  // one hold of two: held, holds
      acquireStep("e", "o1", [](auto& m) { m.set_mode("shared"); }),
      acquireStep("e", "o2", [](auto& m) { m.set_mode("shared"); }),
      acquireStep("f", "o1",
                  [](auto& m) {
                    m.set_fair(true);
                    m.set_lock_delay_ms(100);
                  }),
      acquireStep("g", "o1",
                  [](auto& m) {
                    m.set_auto_renew(true);
                    m.set_max_hold_ms(20000);
                  }),
      acquireStep("h", "o1",
                  [](auto& m) {  // a health binding: the bridge carries it
                    m.set_auto_renew(true);
                    m.mutable_health()->set_url("http://127.0.0.1:1/healthz");
                  }),
      acquireStep("x", "o1"),  // token B may use orders~ only (set below)
      extendStep("a", "o1", 5000),
      extendStep("a", "o2", 5000),
      extendStep("a", "o1", 0),
      extendStep("a", "o1", -1),
      extendStep("zzz", "o1", 5000),
      extendStep("e", "o1", 5000, "shared"),
      releaseStep("a", "o2"),
      releaseStep("a", "o1"),
      releaseStep("a", "o1"),
      releaseStep("e", "o1"),
      releaseStep("", "o1"),
      tryLockStep("lockstore", "orders/1", "x", 60),
      tryLockStep("lockstore", "orders/1", "y", 60),
      tryLockStep("nostore", "orders/1", "x", 60),
      tryLockStep("lockstore", "orders/2", "x", 0),
      tryLockStep("lockstore", "orders/2", "x", -3),
      tryLockStep("lockstore", "orders/2", "x", std::numeric_limits<int32_t>::max()),
      tryLockStep("lockstore", "a~b", "x", 60),
      tryLockStep("lockstore", "orders/3", "", 60),
      tryLockStep("", "orders/3", "x", 60),
      unlockStep("lockstore", "orders/1", "y"),
      unlockStep("lockstore", "orders/1", "x"),
      unlockStep("lockstore", "orders/1", "x"),
      unlockStep("lockstore", "", "x"),
      {"/sidelock.v1.Locks/Acquire", "\xff\xff\xff"},
      {"/sidelock.v1.Locks/Release",
       std::string("\x0a\x01\x61\x12\x01\xff", 6)},  // owner not UTF-8
      {"/dapr.proto.runtime.v1.Dapr/UnlockAlpha1", "\x0a"},
  };
  script[3].deadline_ms = 20;
  script[3].max_ms = 100;
  script[2].max_ms = 100;
  script[28].token = "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
  script.push_back(acquireStep("orders~1", "o1"));
  script.back().token = "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBB";
  std::vector<StatusCode> seen;
  for (size_t i = 0; i < script.size(); ++i) {
    const Step& step = script[i];
    auto a = direct.callBytes(step.method, step.bytes, step.token, step.max_ms, step.deadline_ms);
    seen.push_back(a->status.value_or(StatusCode::kUnknown));
    auto b = bridge.callBytes(step.method, step.bytes, step.token, step.max_ms, step.deadline_ms);
    SCOPED_TRACE("step " + std::to_string(i) + " " + step.method);
    ASSERT_TRUE(a->status.has_value());
    ASSERT_TRUE(b->status.has_value());
    EXPECT_EQ(*a->status, *b->status);
    EXPECT_EQ(a->status_message, b->status_message);
    EXPECT_EQ(a->messages, b->messages);
  }
  // The script reached what it meant to: grants, busy, bad input, a replay, scopes, Dapr's answers.
  EXPECT_EQ(seen[0], StatusCode::kOk);
  EXPECT_EQ(seen[1], StatusCode::kAborted);
  EXPECT_EQ(seen[4], StatusCode::kInvalidArgument);
  EXPECT_EQ(seen[19], StatusCode::kOk);
  EXPECT_EQ(seen[28], StatusCode::kPermissionDenied);
  EXPECT_EQ(seen[35], StatusCode::kFailedPrecondition);
  EXPECT_EQ(seen[36], StatusCode::kOk);
  EXPECT_EQ(seen.back(), StatusCode::kOk);
}

// The request side alone: the fields a route reads are the same from BodyFields as from the
// bridge's JSON body, 64-bit extremes and signs included.
TEST(GrpcDirectPathTest, RequestFieldsReadAsTheBridgesJson) {
  const std::initializer_list<BodyField> all = {
      BodyField::kTtlMs,     BodyField::kWaitMs,         BodyField::kOwner,
      BodyField::kAutoRenew, BodyField::kMaxHoldMs,      BodyField::kRequestId,
      BodyField::kReentrant, BodyField::kMode,           BodyField::kFair,
      BodyField::kHolder,    BodyField::kLockDelayMs,    BodyField::kResourceId,
      BodyField::kLockOwner, BodyField::kExpiryInSeconds};
  auto compare = [&](const GrpcMethod& method, const std::string& bytes,
                     std::optional<WaitBound> bound) {
    std::optional<DirectCall> d = directCallOf(method, bytes, bound);
    auto j = httpCallOf(method, bytes, bound);
    ASSERT_TRUE(d.has_value());
    ASSERT_TRUE(j.isOk());
    EXPECT_EQ(d->http.path, j->path);
    EXPECT_EQ(d->http.raw_path, j->raw_path);
    EXPECT_EQ(d->http.method, j->method);
    http::Request rd;
    rd.decoded_body = &d->fields;
    http::Request rj;
    rj.body = j->body;
    rj.headers = {{"content-type", "application/json"}};
    for (BodyField field : all) {
      RequestBody x, y;
      ASSERT_TRUE(x.parse(rd, all)) << x.error();
      ASSERT_TRUE(y.parse(rj, all)) << y.error();
      EXPECT_EQ(x.has(field), y.has(field));
      int64_t xi = 7, yi = 7;
      EXPECT_EQ(x.readInt(field, INT64_MIN, INT64_MAX, xi),
                y.readInt(field, INT64_MIN, INT64_MAX, yi));
      EXPECT_EQ(xi, yi);
      EXPECT_EQ(x.error(), y.error());
      RequestBody x2, y2;
      x2.parse(rd, all);
      y2.parse(rj, all);
      int64_t xr = 7, yr = 7;
      EXPECT_EQ(x2.readInt(field, 1, 1000, xr), y2.readInt(field, 1, 1000, yr));
      EXPECT_EQ(x2.error(), y2.error());
      RequestBody x3, y3;
      x3.parse(rd, all);
      y3.parse(rj, all);
      std::string_view xs, ys;
      bool xb = false, yb = false;
      EXPECT_EQ(x3.readString(field, xs), y3.readString(field, ys));
      EXPECT_EQ(xs, ys);
      RequestBody x4, y4;
      x4.parse(rd, all);
      y4.parse(rj, all);
      EXPECT_EQ(x4.readBool(field, xb), y4.readBool(field, yb));
      EXPECT_EQ(xb, yb);
    }
    // A field the route does not take: the same refusal.
    RequestBody x, y;
    EXPECT_EQ(x.parse(rd, {BodyField::kOwner}), y.parse(rj, {BodyField::kOwner}));
    EXPECT_EQ(x.error(), y.error());
  };
  for (int64_t v :
       {int64_t{1}, int64_t{-1}, std::numeric_limits<int64_t>::max(),
        std::numeric_limits<int64_t>::min(), int64_t{1} << 53, (int64_t{1} << 53) + 1}) {
    v1::AcquireRequest m;
    m.set_name("n/ä b");
    m.set_ttl_ms(v);
    m.set_wait_ms(v);
    m.set_max_hold_ms(v);
    m.set_lock_delay_ms(v);
    m.set_owner("o\"\\\x01");
    m.set_auto_renew(v > 0);
    m.set_reentrant(true);
    m.set_fair(true);
    m.set_mode("shared");
    m.set_holder("h");
    m.set_request_id("r");
    compare(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), m.SerializeAsString(), std::nullopt);
    compare(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), m.SerializeAsString(), WaitBound{250});
    compare(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), m.SerializeAsString(), WaitBound{-4});
    // Over locks.max_wait_ms: both paths pass it on as sent, for the route to refuse.
    m.set_wait_ms(1'000'000'000'000);
    compare(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), m.SerializeAsString(),
            WaitBound{250, 300'000});
    v1::ExtendRequest e;
    e.set_name("n");
    e.set_ttl_ms(v);
    compare(*findGrpcMethod("/sidelock.v1.Locks/Extend"), e.SerializeAsString(), std::nullopt);
  }
  v1::AcquireRequest empty;
  empty.set_name("n");
  compare(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), empty.SerializeAsString(), WaitBound{10});
  for (int32_t v :
       {1, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    dapr::TryLockRequest t;
    t.set_store_name("s t");
    t.set_resource_id("r/1");
    t.set_lock_owner("o");
    t.set_expiry_in_seconds(v);
    compare(*findGrpcMethod("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"), t.SerializeAsString(),
            std::nullopt);
  }
  // What the direct form does not carry goes to the bridge.
  v1::AcquireRequest health;
  health.set_name("n");
  health.mutable_health();
  EXPECT_FALSE(directCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"),
                            health.SerializeAsString(), std::nullopt));
  EXPECT_FALSE(directCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), "\xff", std::nullopt));
  EXPECT_FALSE(directCallOf(*findGrpcMethod("/sidelock.v1.Locks/Inspect"), "", std::nullopt));
}

// The answer side alone: flat answers encode to protobuf's JSON parser's bytes; anything else is
// left to that parser.
TEST(GrpcDirectPathTest, FlatAnswersEncodeAsProtobufsJsonParser) {
  struct Case {
    const google::protobuf::Descriptor* type;
    std::string json;
    bool flat;  // the flat encoder takes it
  };
  const std::vector<Case> cases = {
      {v1::Grant::descriptor(),
       R"({"fair":true,"holds":2,"mode":"shared","name":"a/b c","owner":"o-1","token":9223372036854775807,"ttl_ms":10000})"
       "\n",
       true},
      {v1::Grant::descriptor(), R"({"token":9007199254740993,"ttl_ms":-1})", true},
      {v1::Grant::descriptor(), R"({"token":-9223372036854775808})", true},
      {v1::Grant::descriptor(), R"({"token":0,"name":"","fair":false})", true},
      {v1::Grant::descriptor(), R"( { "name" : "x" , "unknown": 5, "other": "s", "b": true } )",
       true},
      {v1::Grant::descriptor(), R"({"holds":2147483647})", true},
      {v1::Grant::descriptor(), R"({"holds":-2147483648})", true},
      {v1::Released::descriptor(), R"({"held":true,"holds":1,"released":true})", true},
      {v1::Extended::descriptor(), R"({"ttl_ms":5000})", true},
      {dapr::TryLockResponse::descriptor(), R"({"success":false})", true},
      {dapr::UnlockResponse::descriptor(), R"({"status":2})", true},
      {v1::HoldEvent::descriptor(), R"({"event":"acquired","token":3,"cap_reached":true})", true},
      {v1::Grant::descriptor(), "{}", true},
      // In field order (as the routes write them: each key the field after the last one), then
      // out of it, and a key repeated after others.
      {v1::Grant::descriptor(),
       R"({"name":"n","owner":"o","token":3,"ttl_ms":5,"holds":1,"mode":"m","fair":true})", true},
      {v1::Grant::descriptor(), R"({"ttl_ms":5,"name":"n","fair":true,"owner":"o"})", true},
      {v1::Grant::descriptor(), R"({"ttlMs":5,"holds":2})", true},
      // Left to protobuf's parser (errors included).
      {v1::Grant::descriptor(), R"({"name":"n","owner":"o","name":"m"})", false},
      {v1::Grant::descriptor(), R"({"name":"abc)", false},
      {v1::Grant::descriptor(), "{\"name\":\"a\tb\"}", false},
      {v1::Grant::descriptor(), R"({"token":9223372036854775808})", false},
      {v1::Grant::descriptor(), R"({"token":"12"})", false},
      {v1::Grant::descriptor(), R"({"token":1.5})", false},
      {v1::Grant::descriptor(), R"({"token":1e3})", false},
      {v1::Grant::descriptor(), R"({"holds":2147483648})", false},
      {v1::Grant::descriptor(), R"({"name":"\u00e4"})", false},
      {v1::Grant::descriptor(), R"({"name":"ä"})", false},
      {v1::Grant::descriptor(), R"({"name":null})", false},
      {v1::Grant::descriptor(), R"({"name":1})", false},
      {v1::Grant::descriptor(), R"({"fair":1})", false},
      {v1::Grant::descriptor(), R"({"name":"a","name":"b"})", false},
      {v1::Grant::descriptor(), R"({"unknown":{"x":1}})", false},
      {v1::Grant::descriptor(), R"({"token":01})", false},
      {v1::Grant::descriptor(), R"({"token":1} x)", false},
      {v1::Grant::descriptor(), R"([1])", false},
      {v1::Grant::descriptor(), "", false},
      {dapr::UnlockResponse::descriptor(), R"({"status":9})", false},
      {dapr::UnlockResponse::descriptor(), R"({"status":"SUCCESS"})", false},
      {v1::LockState::descriptor(), R"({"held":true})", false},  // has a repeated field
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    std::optional<std::string> flat = flatResponseMessageOf(c.type, c.json);
    EXPECT_EQ(flat.has_value(), c.flat);
    if (!flat) continue;
    auto slow = responseMessageOf(c.type, c.json);
    ASSERT_TRUE(slow.isOk()) << slow.status().message();
    EXPECT_EQ(*flat, *slow);
  }
  auto grant = parsed<v1::Grant>(
      *flatResponseMessageOf(v1::Grant::descriptor(), R"({"token":9007199254740993})"));
  EXPECT_EQ(grant.token(), 9007199254740993);
}

// A gRPC call counts in sidelock_http_in_flight_requests until it is answered, as HTTP requests do.
TEST(GrpcDirectPathTest, CallsCountInFlightUntilAnswered) {
  World w;
  ASSERT_EQ(w.call("/sidelock.v1.Locks/Acquire",
                   [] {
                     v1::AcquireRequest m;
                     m.set_name("busy");
                     m.set_owner("o1");
                     return m;
                   }())
                ->status,
            StatusCode::kOk);
  EXPECT_EQ(w.metrics.http_in_flight.Value(), 0);
  v1::AcquireRequest wait;
  wait.set_name("busy");
  wait.set_owner("o2");
  wait.set_wait_ms(1000);
  auto waiting = w.call("/sidelock.v1.Locks/Acquire", wait, "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 5);
  EXPECT_TRUE(waiting->active());
  EXPECT_EQ(w.metrics.http_in_flight.Value(), 1);
  w.sched.advanceMs(1100);
  EXPECT_EQ(waiting->status, StatusCode::kAborted);
  EXPECT_EQ(w.metrics.http_in_flight.Value(), 0);
  // A call dropped unanswered (the client went away) leaves the count too.
  auto gone = w.call("/sidelock.v1.Locks/Acquire", wait, "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 5);
  EXPECT_EQ(w.metrics.http_in_flight.Value(), 1);
  gone->cancel();
  w.sched.advanceMs(10);
  gone.reset();
  w.sched.advanceMs(1100);
  EXPECT_EQ(w.metrics.http_in_flight.Value(), 0);
}

}  // namespace
}  // namespace sidelock::api
