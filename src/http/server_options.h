// What an HttpServer listens on and the limits it enforces. The HTTP layer's own struct (it does
// not include the configuration layer): main fills it from config::ListenConfig.
#pragma once

#include <cstdint>
#include <string>

namespace sidelock::http {

struct ServerOptions {
  std::string tcp;        // "host:port" for start(); "" = none
  std::string unix_path;  // Unix socket for start(); "" = none
  uint32_t unix_mode = 0660;
  int64_t unix_gid = -1;  // group of the socket file; -1 = unchanged
  int max_connections = 1024;
  int max_connections_per_peer = 0;  // 0 = no cap
  int max_stream_holds = 16384;      // streamed responses, on top of max_connections
  int max_header_bytes = 16 * 1024;  // request line + headers
  int max_body_bytes = 64 * 1024;
  int max_pipelined_requests = 64;  // parsed but unanswered requests per connection
  int64_t header_timeout_ms = 10'000;
  int64_t idle_timeout_ms = 60'000;
  int64_t write_timeout_ms = 30'000;
  /// Output of a streamed response (event and observe streams, stream holds) that its reader has
  /// not taken yet, beyond what the kernel holds: on a connection already 64 KiB behind, a chunk
  /// that would take it past `max_stream_backlog_bytes`, or the server's unwritten output past
  /// `max_unwritten_bytes`, closes that connection (the stream ends; its reader reconnects and
  /// reads the state again). A reader that stopped (paused, not reading) must not grow the
  /// sidecar's memory until the write timeout.
  size_t max_stream_backlog_bytes = 1024 * 1024;
  size_t max_unwritten_bytes = 64 * 1024 * 1024;
};

}  // namespace sidelock::http
