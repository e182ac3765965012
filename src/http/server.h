// The HTTP/1.1 server: TCP and Unix-socket listeners, one Connection per client (connection.h)
// with a RequestParser (request_parser.h) and a response writer (response_writer.h)
// under limits (ServerOptions), keep-alive, pipelining with in-order responses,
// chunked streams, timeouts (header/slowloris, idle, write) and graceful stop. Knows nothing of
// locks: requests go to one Handler (usually Router::asHandler()).
//
// Lifecycle (all on the loop thread):
//   HttpServer server(loop, scheduler, cfg.listen, metrics, router.asHandler());
//   server.start();                        // or listenTcp("127.0.0.1:0") / listenUnix(path, mode)
//   ... uv_run ...
//   server.stopAccepting();                // close listeners; later responses say Connection:
//   close server.closeIdleConnections();         // and wait until inFlightRequests() == 0 (or a
//   grace) server.close(done);                    // close every connection and handle; done is
//   posted
//   ... uv_run until the loop drains; uv_loop_close(loop) == 0
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "event/scheduler.h"
#include "event/stream_listener.h"
#include "event/uv_handle.h"
#include "http/http_types.h"
#include "http/listener_connections.h"
#include "http/server_options.h"
#include "metrics/metrics.h"

namespace sidelock::http {

class Router;

class HttpServer {
 public:
  /// `limits` is copied (tcp / unix_path / unix_mode are used only by start()). `scheduler`,
  /// `metrics` and the loop must outlive the server.
  HttpServer(uv_loop_t* loop, event::Scheduler& scheduler, const ServerOptions& limits,
             metrics::Metrics& metrics, Handler handler);
  /// Convenience: dispatches through `router`, which must outlive the server.
  HttpServer(uv_loop_t* loop, event::Scheduler& scheduler, const ServerOptions& limits,
             metrics::Metrics& metrics, const Router& router);
  /// Closes everything (like close() without a callback).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Listens on limits.tcp and limits.unix_path (each when non-empty) with limits.unix_mode and
  /// limits.unix_gid.
  /// On error nothing stays open.
  Status start();
  /// Listens on "host:port" (port 0: a free port, see tcpPort()). At most one TCP listener.
  Status listenTcp(std::string_view host_port);
  /// Listens on a Unix socket (stale socket file removed first, group `gid` unless -1, chmod to
  /// `mode`, unlinked on stop; see event::StreamListener::listenUnix). At most one Unix listener.
  Status listenUnix(const std::string& path, uint32_t mode, int64_t gid = -1);

  /// The bound TCP port, 0 when not listening on TCP.
  int tcpPort() const { return tcp_.port(); }
  /// The Unix socket path, "" when not listening on one.
  const std::string& unixPath() const { return unix_.unixPath(); }

  /// Closes the listeners (the Unix socket file is removed) and enters draining: every later
  /// response carries Connection: close, no new request is read on an existing connection, and
  /// connections close as soon as they have nothing in flight. Idempotent.
  void stopAccepting();
  /// Closes connections that have no request in flight or partly received and nothing left to
  /// write. Returns how many were closed.
  size_t closeIdleConnections();
  /// Requests handed to the handler and not yet answered (a stream counts until endStream()).
  size_t inFlightRequests() const { return in_flight_; }
  size_t connectionCount() const { return connections_.size(); }

  /// Waits until no connection has output left that the kernel has not taken (answers, stream
  /// events and the ends of streams written so far), then runs `done` on a later loop turn with
  /// 0; after `timeout_ms` at most, with how many connections still had output (a client that
  /// stopped reading loses it). Call it before close(), which drops unwritten output: a stream
  /// would end in a bare EOF. A second call replaces the first one's `done`.
  void drainOutput(int64_t timeout_ms, std::function<void(size_t unwritten)> done);

  /// Stops accepting and closes every connection now: responders of unanswered requests see
  /// onClientGone (posted, like every client-gone notification; they run before `done`) and
  /// their later writes are dropped. `done` runs on a later loop turn (Scheduler::post), so keep
  /// the scheduler open until it has run; then run the loop until it drains.
  void close(std::function<void()> done = {});

 private:
  class Connection;
  class Exchange;
  struct Guard;
  struct RouteMetrics {
    prometheus::Histogram* latency = nullptr;
    std::vector<std::pair<int, prometheus::Counter*>> codes;
  };

  /// Connections of one listener: each listener (TCP, Unix; the admin listener is its own
  /// server) has its own max_connections, per-peer counts and stream-hold pool.
  struct ConnectionBudget : ListenerConnections {
    size_t stream_holds = 0;  // against limits_.max_stream_holds
  };

  void onConnection(event::StreamListener& listener, ConnectionBudget& budget);
  /// Admits a connection of `peer_key` to `budget`, closing the longest-idle connection of the
  /// peer (at its cap) or of the listener (at max_connections) when needed. False: no room.
  bool makeRoom(ConnectionBudget& budget, const std::string& peer_key);
  bool evictLongestIdle(const ConnectionBudget& budget, const std::string* peer_key);
  void countIn(Connection* connection);
  void countOut(Connection* connection);
  /// A connection that starts a streamed response moves to the stream-hold pool (when it has
  /// room), freeing its max_connections slot; it moves back when the stream ends.
  void enterStreamHold(Connection* connection);
  void leaveStreamHold(Connection* connection);
  void destroyConnection(Connection* connection);
  /// Writes `connection`'s output just before the loop next polls (once per loop turn).
  void queueFlush(Connection* connection);
  void flushQueued();
  void recordResponse(std::string_view route, int status, int64_t received_us);
  /// drainOutput(): runs its `done` (posted) once no connection has unwritten output.
  void checkDrained();
  void finishDrain(size_t unwritten);
  void addInFlight(int delta);

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  ServerOptions limits_;
  metrics::Metrics& metrics_;
  Handler handler_;
  event::StreamListener tcp_;
  event::StreamListener unix_;
  ConnectionBudget tcp_budget_;
  ConnectionBudget unix_budget_;
  size_t refusing_ = 0;  // connections over budget being answered 503
  // Output written by handlers that the kernel has not taken, over every connection (each
  // connection's part is brought up to date when it settles, flushes or closes).
  size_t unwritten_bytes_ = 0;
  std::unordered_map<Connection*, std::unique_ptr<Connection>> connections_;
  struct RouteHash {
    using is_transparent = void;  // look routes up by string_view, without a copy per request
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, RouteMetrics, RouteHash, std::equal_to<>> route_metrics_;
  // Connections with output waiting for the end of the loop turn: all the responses a connection
  // completes in one turn leave in one write.
  event::UvHandle<uv_prepare_t> flush_prepare_;
  std::vector<Connection*> flush_queue_;
  // Counts loop turns (a check handle, after each poll), so each connection's work budget is
  // per turn however many reads and resumes it gets within one.
  event::UvHandle<uv_check_t> turn_check_;
  uint64_t turn_ = 1;
  size_t in_flight_ = 0;
  bool draining_ = false;
  bool closed_ = false;
  std::function<void(size_t)> drained_;  // drainOutput()'s callback while it waits
  event::ScopedTimer drain_timer_;
  // One read buffer for all connections: the loop is single-threaded and each read is parsed
  // (or its unparsed rest copied) before the next alloc callback.
  std::vector<char> read_buffer_;
};

}  // namespace sidelock::http
