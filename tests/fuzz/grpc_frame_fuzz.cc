// libFuzzer target: bytes a client sends -> the HTTP/2 transport and gRPC framing (an nghttp2
// server session per connection, src/http/http2_server.cc; message prefixes, grpc-timeout,
// trailers, src/grpc/grpc_server.cc), through a real loop and a real Unix socket: each input is
// one connection that writes the bytes and then its EOF; the loop runs until the server has closed
// the connection. A test handler echoes, streams, answers errors or never answers. A crash, a
// sanitizer report, a leak or a broken invariant (a trap) is a finding; so is a server that does
// not close a connection whose client has gone (the loop would spin: libFuzzer's -timeout).
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "event/uv_scheduler.h"
#include "grpc/grpc_server.h"

namespace {

using namespace sidelock;

constexpr size_t kMaxMessage = 4096;

void check(bool invariant) {
  if (!invariant) __builtin_trap();
}

struct World {
  uv_loop_t loop{};
  std::unique_ptr<event::UvScheduler> scheduler;
  std::unique_ptr<grpc::GrpcServer> server;
  std::string path;

  World() {
    uv_loop_init(&loop);
    scheduler = std::make_unique<event::UvScheduler>(&loop);
    grpc::GrpcServerOptions options;
    options.http2.max_concurrent_streams = 4;
    options.http2.max_header_list_bytes = 2048;
    options.http2.idle_timeout_ms = 60'000;
    options.http2.write_timeout_ms = 60'000;
    options.max_message_bytes = kMaxMessage;
    server = std::make_unique<grpc::GrpcServer>(
        &loop, *scheduler, options, [](grpc::CallPtr call, std::string request) {
          check(request.size() <= kMaxMessage);
          check(call->active());
          const std::string& method = call->info().method;
          if (method.size() % 4 == 0) {
            call->sendMessage(request);
            call->finish(grpc::StatusCode::kOk, "");
          } else if (method.size() % 4 == 1) {
            call->sendMessage("a");
            call->sendMessage(std::string(request.size() * 3, 'b'));
            call->finish(grpc::StatusCode::kAborted, request);
          } else if (method.size() % 4 == 2) {
            call->finish(grpc::StatusCode::kNotFound, request);  // trailers-only
          } else {
            call->onCancelled([call] { check(!call->active()); });  // never answered
          }
        });
    char dir[] = "/tmp/sidelock-grpc-fuzz.XXXXXX";
    if (mkdtemp(dir) == nullptr) abort();
    path = std::string(dir) + "/s";
    if (!server->listenUnix(path, 0600).isOk()) abort();
  }
};

World& world() {
  static World* w = new World();  // lives for the process (libFuzzer never returns)
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;  // more than the socket buffer: not worth the blocking logic
  World& w = world();
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", w.path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) abort();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  // The connection must be accepted before writing into a full buffer could block.
  size_t written = 0;
  bool eof_sent = false;
  bool server_closed = false;
  char sink[65536];
  for (int turn = 0; turn < 100000 && !server_closed; ++turn) {
    if (written < size) {
      ssize_t n = write(fd, data + written, size - written);
      if (n > 0) written += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN) written = size;  // the server closed first
    } else if (!eof_sent) {
      shutdown(fd, SHUT_WR);
      eof_sent = true;
    }
    uv_run(&w.loop, UV_RUN_NOWAIT);
    for (;;) {
      ssize_t n = read(fd, sink, sizeof(sink));
      if (n > 0) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN)) server_closed = true;
      break;
    }
  }
  close(fd);
  check(server_closed);
  // Let the closed connection's handles and posted destruction run.
  for (int i = 0; i < 4; ++i) uv_run(&w.loop, UV_RUN_NOWAIT);
  check(w.server->connectionCount() == 0);
  return 0;
}
