// The benchmark's gRPC client: unary calls multiplexed as concurrent streams on one HTTP/2
// connection (prior knowledge, cleartext), one nghttp2 client session per connection, non-blocking
// socket driven by GrpcLoop (epoll over every connection, one thread, like load_loop.h's
// EventLoop). Messages are what the caller serialized with the generated protobuf code; this file
// only adds gRPC's 5-byte length prefix (grpcFrame) and reads the status from the trailers.
//
// As lean per call as load_loop.h's HTTP/1.1 client, so that the client is not the bottleneck it
// measures (at 1 concurrent call its CPU is on the critical path): the caller frames each message
// once and keeps it, with its handler, for as long as it makes calls; a call takes a stream record
// from a free list (nghttp2's stream user data points at it) and nghttp2 reads the body from the
// caller's bytes; a response message that arrives in one DATA chunk reaches the handler without
// being copied. Nothing here allocates per call in steady state (nghttp2 itself does, from a pool
// of blocks it reuses: http::Http2Memory).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http/http2_memory.h"

struct nghttp2_session;

namespace sidelock::bench {

/// One finished call, valid only during the handler call.
struct GrpcReply {
  bool broken = false;              // the connection failed (or the stream was reset) first
  int grpc_status = -1;             // grpc-status from the trailers (or a trailers-only answer)
  std::string_view message = {};    // the response message bytes (without the 5-byte prefix)
  std::string_view grpc_text = {};  // grpc-message (only with a non-zero grpc-status)
};

/// A serialized message with gRPC's 5-byte prefix (not compressed, big-endian length), ready to
/// pass to GrpcConnection::call as-is.
std::string grpcFrame(std::string_view message);

class GrpcConnection {
 public:
  using Handler = std::function<void(const GrpcReply&)>;

  /// Connects to 127.0.0.1:port (blocking, then non-blocking); throws on failure.
  static std::unique_ptr<GrpcConnection> tcp(int port);
  ~GrpcConnection();
  GrpcConnection(const GrpcConnection&) = delete;
  GrpcConnection& operator=(const GrpcConnection&) = delete;

  /// Starts a unary call of `path` ("/sidelock.v1.Locks/Acquire") with one message framed by
  /// grpcFrame(); `*done` runs once when it ends. Nothing is copied: `path`, `framed` and `*done`
  /// must outlive the call (build them once per caller). Bytes go out at the next flush() (GrpcLoop
  /// does it).
  void call(std::string_view path, std::string_view framed, const Handler* done);
  int pending() const { return pending_; }
  bool broken() const { return fd_ < 0; }

 private:
  friend class GrpcLoop;
  friend struct GrpcCallbacks;
  explicit GrpcConnection(int fd, int port);
  void readAvailable();
  void flush();
  bool wantsWrite() const { return fd_ >= 0 && !out_.empty(); }
  void fail();

  /// A call in flight; reused from `free_` for the next call once it ended.
  struct Stream {
    bool active = false;
    std::string_view request;  // the caller's framed message
    size_t request_sent = 0;
    const Handler* done = nullptr;
    // The response's DATA bytes (prefix included): a view of nghttp2's input while it is one
    // chunk that arrived in the current read (`borrowed`), else `response_copy`.
    std::string_view response;
    bool borrowed = false;
    std::string response_copy;
    int grpc_status = -1;
    bool has_text = false;
    std::string grpc_text;  // grpc-message, kept only while the status is not known to be 0
  };
  Stream* takeStream();
  void finish(Stream& s, const GrpcReply& r);
  /// Called at the end of each read: responses still borrowed from its bytes are copied.
  void keepBorrowed();

  int fd_;
  std::string authority_;
  // nghttp2's allocator, as the sidecar's (src/http/http2_memory.h): a call's dozen small blocks
  // cost a push and a pop each instead of malloc and free. Outlives session_ (deleted in the
  // destructor's body).
  http::Http2Memory memory_;
  nghttp2_session* session_ = nullptr;
  std::vector<std::unique_ptr<Stream>> streams_;  // every record (stable addresses)
  std::vector<Stream*> free_;
  std::vector<Stream*> borrowing_;  // streams whose `response` views the current read
  int pending_ = 0;
  std::string out_;  // bytes nghttp2 produced that the socket has not taken yet
  int epoll_fd_ = -1;            // the GrpcLoop's, set by add()
  bool watching_write_ = false;  // its interest in EPOLLOUT
};

/// Drives connections until `done()` (checked after every batch of events) or `deadline`.
class GrpcLoop {
 public:
  using Clock = std::chrono::steady_clock;
  GrpcLoop();
  ~GrpcLoop();
  GrpcLoop(const GrpcLoop&) = delete;
  GrpcLoop& operator=(const GrpcLoop&) = delete;

  /// `c` must outlive the loop's runs (closing its socket takes it out of the epoll set).
  void add(GrpcConnection* c);
  /// `tick` runs on every turn, for the caller's timed steps; a turn comes when a connection
  /// has something to read or at the time last given to wakeAt.
  bool runUntil(const std::function<bool()>& done, const std::function<void()>& tick,
                Clock::time_point deadline);
  /// Ends the loop's wait at `when` (a timerfd), so that a tick runs then: the open loop's
  /// schedule, a pair slice's start and end of measuring. The latest call wins.
  void wakeAt(Clock::time_point when);

 private:
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  std::vector<GrpcConnection*> conns_;
};

}  // namespace sidelock::bench
