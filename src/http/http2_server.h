// The HTTP/2 server transport: cleartext with prior knowledge (how gRPC clients connect), TCP and
// Unix listeners, one nghttp2 server session per connection driven from the libuv loop (bytes
// read go into nghttp2_session_mem_recv, what nghttp2_session_mem_send produces goes to the socket,
// as Node's src/node_http2.cc does). Knows nothing of gRPC or locks: each request stream is handed
// to one StreamHandler once its headers are complete; the handler reads its body and answers
// through the Http2Stream.
//
// Limits (Http2Options): connections per listener and per peer (at the cap the longest-idle
// connection makes room), concurrent streams per connection (SETTINGS; more are refused with
// REFUSED_STREAM), the request header list (SETTINGS_MAX_HEADER_LIST_SIZE; past it nothing is
// kept and the handler gets the stream marked headersTooLarge()), CONTINUATION frames per header
// block, RST_STREAM rate (rapid reset, CVE-2023-44487: GOAWAY), SETTINGS and queued ACKs (SETTINGS
// / PING floods), the flow-control window, request bytes held for requests not yet ended (per
// connection and per server: more resets the stream with ENHANCE_YOUR_CALM), a request timeout (the
// preface, and each request until its END_STREAM), an idle timeout (no stream open), response bytes
// queued per stream and per connection, and a write timeout (a peer that takes no output, whether
// it stops reading the socket or grants no flow-control window, is closed: output is produced only
// while less than kMaxBufferedOutput waits for the socket).
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "event/stream_listener.h"
#include "event/uv_handle.h"
#include "http/http_types.h"
#include "http/listener_connections.h"

namespace sidelock::http {

struct Http2Options {
  int max_concurrent_streams = 100;
  int max_header_list_bytes = 16 * 1024;
  int initial_window_bytes = 1024 * 1024;  // per stream; the connection window is the same
  /// Per listener; at the cap the connection with no stream open for longest is closed to make
  /// room, and a newcomer is closed at accept only when every connection has a stream open.
  int max_connections = 1024;
  int max_connections_per_peer = 0;  // per uid (Unix socket) or IP address (TCP); 0 = no cap
  int64_t idle_timeout_ms = 60'000;  // no stream open this long: GOAWAY (reads do not count)
  /// The client's preface (its first SETTINGS) and each request (HEADERS to END_STREAM) must
  /// arrive within this: a slow or stuck client holds no stream or connection longer.
  int64_t request_timeout_ms = 10'000;
  /// Output taken by nobody this long closes the connection: a write the socket does not take, or
  /// response bytes queued while the client grants no flow-control window.
  int64_t write_timeout_ms = 30'000;
  /// Request body bytes received on streams whose request has not ended (the gRPC layer holds
  /// them until END_STREAM): per connection, and over every connection of the server. A stream
  /// whose bytes would go past either is reset (ENHANCE_YOUR_CALM) and its bytes let go.
  size_t max_request_bytes_per_connection = 8 * 1024 * 1024;
  size_t max_request_bytes = 64 * 1024 * 1024;
  /// Response bytes queued on one stream that the client's flow-control window has not let out
  /// yet; a write past this resets the stream (a client that reads a stream too slowly must not
  /// grow the sidecar's memory). One write larger than this is accepted on an empty queue.
  size_t max_queued_bytes_per_stream = 4 * 1024 * 1024;
  /// The same over every stream of one connection, and over every connection of the server (a
  /// write past either resets its stream too).
  size_t max_queued_bytes_per_connection = 8 * 1024 * 1024;
  size_t max_queued_bytes = 64 * 1024 * 1024;
  /// RST_STREAM token bucket (rapid reset): burst, and tokens regained per second. Cancelling a
  /// call is how a client ends a stream hold, a campaign or an event stream: a pool of workers on
  /// one connection cancels a few hundred a second (a user's test tripped 33/s and lost every
  /// hold on the connection), while a rapid-reset attack sends tens of thousands.
  uint64_t reset_burst = 1000;
  uint64_t reset_rate = 200;
};

using Http2Header = std::pair<std::string, std::string>;

/// A header field to send: views of its name (lower case) and value. A field made by literal()
/// names bytes of static storage duration (string literals: consteval refuses anything else),
/// which nghttp2 then encodes without copying them first (NGHTTP2_NV_FLAG_NO_COPY_NAME |
/// NO_COPY_VALUE); any other field is copied when it is handed over, so its bytes need to live
/// only through the call of respond() or end().
struct Http2Field {
  constexpr Http2Field() = default;
  constexpr Http2Field(std::string_view field_name, std::string_view field_value)
      : name(field_name), value(field_value) {}
  static consteval Http2Field literal(std::string_view field_name, std::string_view field_value) {
    Http2Field field(field_name, field_value);
    field.is_static = true;
    return field;
  }

  std::string_view name;
  std::string_view value;
  bool is_static = false;
};

/// A request's pseudo-header fields (RFC 9113 8.3.1), "" for one it did not send.
struct Http2PseudoHeaders {
  std::string method;     // :method
  std::string scheme;     // :scheme
  std::string path;       // :path
  std::string authority;  // :authority
};

class Http2Server;
class Http2Connection;
class Http2Memory;
struct Http2StreamAccess;

/// One request stream. Shared by the connection and the handler; once the stream is closed
/// (answered, reset by the peer, connection gone) every call is a no-op returning false.
class Http2Stream {
 public:
  Http2Stream() = default;
  Http2Stream(const Http2Stream&) = delete;
  Http2Stream& operator=(const Http2Stream&) = delete;
  /// The request's pseudo-header fields (each at most once: nghttp2 refuses a request that
  /// repeats one, or that has one a request may not have, before it reaches the stream).
  /// A handler may move the values out (no copy of the strings, no second struct).
  Http2PseudoHeaders& pseudoHeaders() { return pseudo_headers_; }
  const Http2PseudoHeaders& pseudoHeaders() const { return pseudo_headers_; }
  /// The request's other header fields as received (no pseudo-header: a handler keeps them as
  /// they are, without sorting them out).
  const std::vector<Http2Header>& headers() const { return headers_; }
  std::string_view header(std::string_view lower_name) const;
  /// Moves the header fields out (a handler that keeps them, without copying each string);
  /// headers() and header() are empty afterwards.
  std::vector<Http2Header> takeHeaders() { return std::move(headers_); }
  const std::shared_ptr<const PeerIdentity>& peer() const { return peer_; }
  int32_t id() const { return id_; }
  /// The request's header list was over Http2Options::max_header_list_bytes: none of it was kept
  /// (pseudoHeaders() and headers() are empty); the handler answers the refusal.
  bool headersTooLarge() const { return headers_too_large_; }

  /// Request body pieces as they arrive; `on_end` when the client ended its side (END_STREAM).
  void onData(std::function<void(std::string_view)> cb) { on_data_ = std::move(cb); }
  void onEnd(std::function<void()> cb) { on_end_ = std::move(cb); }
  /// Once, when the stream closes for any reason: `answered` is true when the whole response
  /// (END_STREAM included) was handed to the socket before the close; false when the peer reset
  /// the stream or the connection went first.
  void onClose(std::function<void(bool answered)> cb) { on_close_ = std::move(cb); }

  /// Sends the response headers; with `end_stream` the response ends there (no body).
  bool respond(std::span<const Http2Field> fields, bool end_stream);
  /// Queues body bytes (after respond()). False if the stream is gone, or if the bytes already
  /// queued are over Http2Options::max_queued_bytes_per_stream: then the stream is reset
  /// (CANCEL) on a later loop turn and onClose(false) follows.
  bool write(std::string data);
  /// Ends the response after the queued body, with trailers (none: a plain END_STREAM). The
  /// stream keeps what it needs of them until they are sent: the literal() fields as they are,
  /// a copy of the others.
  bool end(std::span<const Http2Field> trailers);
  /// Resets the stream (RST_STREAM with an HTTP/2 error code).
  void reset(uint32_t error_code);
  /// True until the stream closed or the response was ended.
  bool open() const { return connection_ != nullptr && !ending_; }

 private:
  friend class Http2Connection;
  friend struct Http2StreamAccess;
  /// Lets nghttp2 ask for queued body bytes again and produces output.
  void resume();
  /// The trailers end() kept.
  std::span<const Http2Field> trailers() const;

  Http2Connection* connection_ = nullptr;  // null once closed
  int32_t id_ = 0;
  size_t slot_ = 0;  // its index in the connection's streams, while open
  Http2PseudoHeaders pseudo_headers_;
  std::vector<Http2Header> headers_;
  size_t header_bytes_ = 0;
  bool headers_too_large_ = false;
  int64_t opened_us_ = 0;       // the scheduler's clock at its HEADERS (the request timeout)
  size_t request_bytes_ = 0;    // body bytes received while the request is open (its budgets)
  bool request_ended_ = false;  // END_STREAM received, or the stream was refused
  std::shared_ptr<const PeerIdentity> peer_;
  std::function<void(std::string_view)> on_data_;
  std::function<void()> on_end_;
  std::function<void(bool)> on_close_;
  bool responded_ = false;
  bool ending_ = false;  // end() called: EOF once the queue is empty
  // The trailers end() was given, sent when the body is out (Http2StreamAccess::read): inline for
  // the usual few (gRPC's grpc-status and grpc-message), so that ending a call allocates nothing.
  static constexpr size_t kInlineTrailers = 2;
  std::array<Http2Field, kInlineTrailers> trailers_inline_{};
  std::vector<Http2Field> trailers_more_;  // all of them, when more than kInlineTrailers
  size_t trailer_count_ = 0;
  std::string trailer_bytes_;  // the names and values of the fields not made by literal()
  bool deferred_ = false;  // the data provider said NGHTTP2_ERR_DEFERRED
  bool end_sent_ = false;  // a frame with END_STREAM left nghttp2
  std::string out_;        // body bytes queued (one buffer: a unary answer is moved in whole)
  size_t queued_bytes_ = 0;  // in out_, not yet taken by nghttp2
  size_t out_offset_ = 0;    // bytes of out_ already taken
};

using Http2StreamPtr = std::shared_ptr<Http2Stream>;
/// Called once per request stream, when its headers are complete.
using StreamHandler = std::function<void(Http2StreamPtr stream)>;

class Http2Server {
 public:
  /// `scheduler` and the loop must outlive the server.
  Http2Server(uv_loop_t* loop, event::Scheduler& scheduler, const Http2Options& options,
              StreamHandler handler);
  ~Http2Server();
  Http2Server(const Http2Server&) = delete;
  Http2Server& operator=(const Http2Server&) = delete;

  Status listenTcp(std::string_view host_port);
  Status listenUnix(const std::string& path, uint32_t mode, int64_t gid = -1);
  int tcpPort() const { return tcp_.port(); }
  const std::string& unixPath() const { return unix_.unixPath(); }
  size_t connectionCount() const { return connections_.size(); }
  /// Streams open over every connection (a walk of the connections: for scrapes, not hot paths).
  size_t streamCount() const;

  /// Closes the listeners and sends every connection a GOAWAY (no new streams); open streams go
  /// on. Idempotent.
  void stopAccepting();
  /// Closes the listeners and every connection now: open streams see onClose(false). `done`
  /// runs on a later loop turn.
  void close(std::function<void()> done = {});

 private:
  friend class Http2Connection;
  /// The connections of one listener, for max_connections and max_connections_per_peer.
  using ListenerBudget = ListenerConnections;
  void onConnection(event::StreamListener& listener, ListenerBudget& budget);
  /// Closes the longest-idle connection (no stream open) of `peer_key`, or of the listener when
  /// null; false when none is idle (ListenerConnections::makeRoom).
  bool evictLongestIdle(const ListenerBudget& budget, const std::string* peer_key);
  void destroyConnection(Http2Connection* connection);
  /// Output is produced once per loop turn, as HttpServer's is: a connection with
  /// something to send is queued, and a uv_prepare (before the loop blocks) has nghttp2 produce
  /// everything its streams submitted meanwhile and writes it at once (uv_try_write, then a
  /// uv_write for what the socket did not take).
  void queueFlush(Http2Connection* connection);
  void unqueueFlush(Http2Connection* connection);
  void flushQueued();

  event::Scheduler& scheduler_;
  Http2Options options_;
  StreamHandler handler_;
  event::StreamListener tcp_;
  event::StreamListener unix_;
  ListenerBudget tcp_budget_;
  ListenerBudget unix_budget_;
  size_t request_bytes_ = 0;  // Http2Options::max_request_bytes: over every connection
  size_t queued_bytes_ = 0;   // Http2Options::max_queued_bytes: over every connection
  /// nghttp2's allocator for every session of the server (http2_memory.h). Declared before
  /// connections_, so destroyed after them: their sessions free into it.
  std::unique_ptr<Http2Memory> memory_;
  std::unordered_map<Http2Connection*, std::unique_ptr<Http2Connection>> connections_;
  bool draining_ = false;
  bool closed_ = false;
  std::vector<char> read_buffer_;
  event::UvHandle<uv_prepare_t> flush_prepare_;
  std::vector<Http2Connection*> flush_queue_;
  event::LivenessToken alive_;
};

}  // namespace sidelock::http
