// The benchmark's gRPC client: unary calls multiplexed as concurrent streams on one HTTP/2
// connection (prior knowledge, cleartext), one nghttp2 client session per connection, non-blocking
// socket driven by GrpcLoop (poll over every connection, one thread, like load_loop.h's EventLoop).
// Messages are what the caller serialized with the generated protobuf code; this file only adds
// gRPC's 5-byte length prefix and reads the status from the trailers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct nghttp2_session;

namespace sidelock::bench {

/// One finished call, valid only during the handler call.
struct GrpcReply {
  bool broken = false;         // the connection failed (or the stream was reset) first
  int grpc_status = -1;        // grpc-status from the trailers (or a trailers-only answer)
  std::string_view message;    // the response message bytes (without the 5-byte prefix)
  std::string_view grpc_text;  // grpc-message
};

class GrpcConnection {
 public:
  using Handler = std::function<void(const GrpcReply&)>;

  /// Connects to 127.0.0.1:port (blocking, then non-blocking); throws on failure.
  static std::unique_ptr<GrpcConnection> tcp(int port);
  ~GrpcConnection();
  GrpcConnection(const GrpcConnection&) = delete;
  GrpcConnection& operator=(const GrpcConnection&) = delete;

  /// Starts a unary call of `path` ("/sidelock.v1.Locks/Acquire") with one serialized message;
  /// `done` runs once when it ends. Bytes go out at the next flush() (GrpcLoop does it).
  void call(std::string_view path, std::string_view message, Handler done);
  int pending() const { return static_cast<int>(streams_.size()); }
  bool broken() const { return fd_ < 0; }

 private:
  friend class GrpcLoop;
  friend struct GrpcCallbacks;
  explicit GrpcConnection(int fd, int port);
  void readAvailable();
  void flush();
  bool wantsWrite() const;
  void fail();

  struct Stream {
    std::string request;  // prefixed message
    size_t request_sent = 0;
    std::string response;  // DATA bytes (prefix included)
    int grpc_status = -1;
    std::string grpc_text;
    Handler done;
  };
  int fd_;
  std::string authority_;
  nghttp2_session* session_ = nullptr;
  std::map<int32_t, Stream> streams_;
  std::string out_;  // bytes nghttp2 produced that the socket has not taken yet
};

/// Drives connections until `done()` (checked after every batch of events) or `deadline`.
class GrpcLoop {
 public:
  using Clock = std::chrono::steady_clock;
  void add(GrpcConnection* c) { conns_.push_back(c); }
  /// `tick` runs on every turn (at least every millisecond), for the caller's timed steps.
  bool runUntil(const std::function<bool()>& done, const std::function<void()>& tick,
                Clock::time_point deadline);

 private:
  std::vector<GrpcConnection*> conns_;
};

}  // namespace sidelock::bench
