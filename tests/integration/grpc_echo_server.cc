// A gRPC server on the real transport (grpc::GrpcServer over http::Http2Server) with test
// methods, for tests/integration/grpc_transport_test.py (python3-h2 clients, hostile peers).
// Small limits so that the tests hit them quickly. Prints "port <n>" once listening; prints
// "cancelled <method>" / "undelivered <method>" when the transport reports them; exits 0 on
// SIGTERM after closing everything (uv_loop_close must succeed).
//
//   /test.Echo/Unary     answers the request bytes
//   /test.Echo/Stream    answers 3 messages "m0".."m2" then OK
//   /test.Echo/Never     never answers (deadline / cancel tests)
//   /test.Echo/Big       answers one message of the request's decimal size in bytes
//   /test.Echo/Flood     64 KiB messages until sendMessage() refuses (stream queue cap)
//   /test.Echo/Fail      trailers-only NOT_FOUND with a non-ASCII message
//   anything else        UNIMPLEMENTED
#include <signal.h>
#include <uv.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "event/uv_handle.h"
#include "event/uv_scheduler.h"
#include "grpc/grpc_server.h"

using namespace sidelock;

int main() {
  uv_loop_t loop;
  uv_loop_init(&loop);
  auto scheduler = std::make_unique<event::UvScheduler>(&loop);
  grpc::GrpcServerOptions options;
  options.http2.max_concurrent_streams = 8;
  options.http2.max_header_list_bytes = 8 * 1024;
  options.http2.initial_window_bytes = 65535;
  options.http2.idle_timeout_ms = 3'000;
  options.http2.write_timeout_ms = 700;
  options.http2.max_queued_bytes_per_stream = 1024 * 1024;
  options.http2.request_timeout_ms = 1'500;
  options.http2.max_request_bytes_per_connection = 160 * 1024;
  options.http2.max_request_bytes = 256 * 1024;
  options.http2.max_connections = 64;
  options.http2.max_connections_per_peer = 8;  // every test client is 127.0.0.1
  options.max_message_bytes = 64 * 1024;
  grpc::CallHandler handler = [&](grpc::CallPtr call, std::string request) {
    const std::string method = call->info().method;
    call->onCancelled([method] { printf("cancelled %s\n", method.c_str()); fflush(stdout); });
    call->onUndelivered([method] { printf("undelivered %s\n", method.c_str()); fflush(stdout); });
    if (method == "/test.Echo/Unary") {
      call->sendMessage(request);
      call->finish(grpc::StatusCode::kOk, "");
    } else if (method == "/test.Echo/Stream") {
      for (int i = 0; i < 3; ++i) call->sendMessage("m" + std::to_string(i));
      call->finish(grpc::StatusCode::kOk, "");
    } else if (method == "/test.Echo/Never") {
      // Kept by its onCancelled closure's owner (the call) until the transport ends it.
    } else if (method == "/test.Echo/Big") {
      call->sendMessage(std::string(std::strtoul(request.c_str(), nullptr, 10), 'x'));
      call->finish(grpc::StatusCode::kOk, "");
    } else if (method == "/test.Echo/Flood") {
      // 64 KiB messages until the stream's queue is full (the client reads nothing).
      int sent = 0;
      while (sent < 1000 && call->sendMessage(std::string(64 * 1024, 'f'))) ++sent;
      printf("flood refused after %d\n", sent);
      fflush(stdout);
    } else if (method == "/test.Echo/Fail") {
      call->finish(grpc::StatusCode::kNotFound, "no such thing: caf\xc3\xa9 100%");
    } else {
      grpc::unimplementedHandler()(std::move(call), std::move(request));
    }
  };
  auto server = std::make_unique<grpc::GrpcServer>(&loop, *scheduler, options, handler);
  Status listening = server->listenTcp("127.0.0.1:0");
  if (!listening.isOk()) {
    fprintf(stderr, "listen: %s\n", listening.toString().c_str());
    return 1;
  }
  printf("port %d\n", server->tcpPort());
  fflush(stdout);
  event::UvHandle<uv_signal_t> sigterm;
  struct Ctx {
    grpc::GrpcServer* server;
    event::UvHandle<uv_signal_t>* sig;
    event::UvScheduler* scheduler;
  } ctx{server.get(), &sigterm, scheduler.get()};
  uv_signal_init(&loop, sigterm.allocate(&ctx));
  uv_signal_start(
      sigterm.get(),
      [](uv_signal_t* h, int) {
        auto* c = static_cast<Ctx*>(h->data);
        c->server->stopAccepting();
        c->server->close([c] {
          c->sig->close();
          c->scheduler->close();
        });
      },
      SIGTERM);
  uv_run(&loop, UV_RUN_DEFAULT);
  server.reset();
  scheduler.reset();
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0) {
    fprintf(stderr, "loop not closed\n");
    return 1;
  }
  return 0;
}
