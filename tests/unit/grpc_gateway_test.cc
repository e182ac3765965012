// The gRPC gateway as pure logic (src/api/grpc_gateway.h): each method's route, the request message
// -> path and JSON body, the HTTP error -> gRPC status table, JSON answers and NDJSON lines ->
// response messages, cancellation -> client gone, the token and Host headers from the metadata, and
// grpc.health.v1.Health (Check, Watch) from /readyz. A fake ServerCall stands for the transport and a
// fake handler for the guarded router; tests/integration/grpc tests the real thing end to end.
#include "api/grpc_gateway.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dapr/proto/runtime/v1/dapr.pb.h"
#include "event/fake_scheduler.h"
#include "grpc/health/v1/health.pb.h"
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
  auto call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), req.SerializeAsString(),
                         std::nullopt);
  ASSERT_TRUE(call.isOk()) << call.status().message();
  EXPECT_EQ(call->method, "POST");
  EXPECT_EQ(call->path, "/v1/locks/orders 7/x/acquire");
  EXPECT_EQ(call->raw_path, "/v1/locks/orders%207%2Fx/acquire");
  const json body = json::parse(call->body);
  EXPECT_EQ(body, json::parse(R"({"ttl_ms": 10000, "wait_ms": 5000, "auto_renew": true,
      "health": {"url": "http://127.0.0.1:8080/healthz", "grace_ms": 3000}})"));

  // The deadline caps wait_ms; Hold adds the stream hold.
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Hold"), req.SerializeAsString(), 1200);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(json::parse(call->body)["wait_ms"], 1200);
  EXPECT_EQ(json::parse(call->body)["hold"], "stream");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), req.SerializeAsString(), -5);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(json::parse(call->body)["wait_ms"], 0);

  // A GET route has no body; an empty path field is refused before any route runs.
  v1::InspectRequest inspect;
  inspect.set_name("a");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Inspect"), inspect.SerializeAsString(),
                    std::nullopt);
  ASSERT_TRUE(call.isOk());
  EXPECT_EQ(call->method, "GET");
  EXPECT_EQ(call->path, "/v1/locks/a");
  EXPECT_EQ(call->body, "");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Inspect"), "", std::nullopt);
  ASSERT_FALSE(call.isOk());
  EXPECT_EQ(call.status().code(), sidelock::StatusCode::kInvalidArgument);
  EXPECT_EQ(json::parse(call.status().message())["error"], "bad_request");
  call = httpCallOf(*findGrpcMethod("/sidelock.v1.Locks/Acquire"), "\xff\xff\xff", std::nullopt);
  ASSERT_FALSE(call.isOk());
  EXPECT_EQ(call.status().code(), sidelock::StatusCode::kInvalidArgument);
}

TEST(GrpcGatewayTest, DaprMessagesUseDaprsJsonNames) {
  dapr::TryLockRequest req;
  req.set_store_name("lockstore");
  req.set_resource_id("orders/42");
  req.set_lock_owner("owner-a");
  req.set_expiry_in_seconds(60);
  auto call = httpCallOf(*findGrpcMethod("/dapr.proto.runtime.v1.Dapr/TryLockAlpha1"),
                         req.SerializeAsString(), 100);
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
  EXPECT_EQ(call->status, StatusCode::kUnimplemented);
  EXPECT_NE(call->status_message.find("sidelock does not implement"), std::string::npos);
  call = std::make_shared<FakeCall>("/sidelock.v1.Locks/Release");
  gateway.handle(call, "");  // no name
  EXPECT_EQ(call->status, StatusCode::kInvalidArgument);
  EXPECT_EQ(seen.count, 0);
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

}  // namespace
}  // namespace sidelock::api
