// gRPC over the HTTP/2 transport (http::Http2Server): request validation (POST,
// content-type application/grpc[+proto], te: trailers), the 5-byte length prefix with a maximum
// message size, grpc-timeout as the call's deadline, response headers, messages and the
// grpc-status / grpc-message trailers (trailers-only for an error before any message). Knows
// nothing of protobuf or locks: messages are opaque bytes handed to one CallHandler
// (server_call.h), which answers unknown methods itself.
#pragma once

#include <uv.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "event/scheduler.h"
#include "grpc/server_call.h"
#include "http/http2_server.h"

namespace sidelock::grpc {

struct GrpcServerOptions {
  http::Http2Options http2;
  size_t max_message_bytes = 4 * 1024 * 1024;  // each way, as gRPC's default
  /// A call the transport answered itself before its handler saw it (bad headers, a compressed,
  /// oversized or missing message, its deadline passed before its request ended), with the HTTP
  /// status its refusal stands for (400, 405, 408, 413, 415, 431, 501): for the metrics, which
  /// count every call as the HTTP listener counts every request. May be empty.
  std::function<void(int http_status)> on_refused;
};

/// Parses a grpc-timeout value ("100m", "5S": 1 to 8 digits and a unit H M S m u n) into
/// microseconds (at least 1); nullopt if malformed.
std::optional<int64_t> parseGrpcTimeout(std::string_view value);

/// How long before a call's grpc-timeout the sidecar ends it (DEADLINE_EXCEEDED, its work
/// cancelled): a tenth of the timeout, at least 2 ms and at most 100 ms, so that an answer sent
/// before then reaches the client before its own deadline.
constexpr int64_t deadlineMarginUs(int64_t timeout_us) {
  return std::clamp<int64_t>(timeout_us / 10, 2'000, 100'000);
}

/// A CallHandler answering every call UNIMPLEMENTED with a message naming sidelock.
CallHandler unimplementedHandler();

class GrpcServer {
 public:
  /// `scheduler` and the loop must outlive the server.
  GrpcServer(uv_loop_t* loop, event::Scheduler& scheduler, const GrpcServerOptions& options,
             CallHandler handler);
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  Status listenTcp(std::string_view host_port) { return transport_.listenTcp(host_port); }
  Status listenUnix(const std::string& path, uint32_t mode, int64_t gid = -1) {
    return transport_.listenUnix(path, mode, gid);
  }
  int tcpPort() const { return transport_.tcpPort(); }
  const std::string& unixPath() const { return transport_.unixPath(); }
  size_t connectionCount() const { return transport_.connectionCount(); }
  /// Calls in progress (unary ones in flight, streaming ones open), over every connection.
  size_t callCount() const { return transport_.streamCount(); }

  /// Closes the listeners and sends GOAWAY: calls in progress go on. Idempotent.
  void stopAccepting() { transport_.stopAccepting(); }
  /// Closes every connection now: open calls see onCancelled. `done` runs on a later loop turn.
  void close(std::function<void()> done = {}) { transport_.close(std::move(done)); }

 private:
  void onStream(http::Http2StreamPtr stream);

  event::Scheduler& scheduler_;
  GrpcServerOptions options_;
  // Declared before transport_, so destroyed after it: the calls refer to it while their streams
  // are open, and destroying the transport closes every stream.
  CallHandler handler_;
  http::Http2Server transport_;
};

}  // namespace sidelock::grpc
