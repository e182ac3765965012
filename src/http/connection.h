// Internal to the HTTP server (server.cc, connection.cc): one client connection and the
// exchanges (request + responder) it serves in order. Not part of the http layer's interface.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "event/lifetime.h"
#include "event/stream_listener.h"
#include "event/uv_handle.h"
#include "http/request_parser.h"
#include "http/response_writer.h"
#include "http/server.h"

namespace sidelock::http {

// The bytes of one uv_write and its request, reused for the connection's life. If the
// connection closes while a write is pending, it is orphaned and the write callback frees it.
struct WriteReq {
  uv_write_t req{};
  std::string data;
  bool orphaned = false;
};

// ---------------------------------------------------------------------------------------------
// Exchange: one request and its (shared) responder. The connection queues exchanges in request
// order; an exchange's bytes go straight to the connection's output while it is at the head of
// the queue and are buffered in pending_ otherwise.

class HttpServer::Exchange final : public Responder {
 public:
  enum class State { kWaiting, kStreaming, kDone };

  explicit Exchange(Connection* connection) : conn_(connection) {}

  void send(int status, std::string_view content_type, std::string body,
            std::vector<std::pair<std::string, std::string>> extra_headers) override;
  void startStream(int status, std::string_view content_type) override;
  bool writeChunk(std::string_view data) override;
  void endStream() override;
  bool clientConnected() const override;
  void onClientGone(std::function<void()> cb) override {
    if (state_ != State::kDone && !gone_) gone_cb_ = std::move(cb);
  }
  void onUndelivered(std::function<void()> cb) override {
    if (state_ == State::kWaiting) undelivered_cb_ = std::move(cb);
  }

  Request request;
  Connection* conn_;  // null once written out or detached; later calls are then no-ops
  State state_ = State::kWaiting;
  std::string pending_;
  bool keep_alive_ = true;
  ResponseFraming framing_;  // close is decided when the response starts
  bool in_flight_ = false;   // counted in HttpServer::in_flight_
  bool gone_ = false;
  std::function<void()> gone_cb_;
  std::function<void()> undelivered_cb_;
};

// ---------------------------------------------------------------------------------------------
// Connection. Every entry point (uv callbacks, timers, responder calls, server calls) holds a
// Guard; when the outermost Guard exits, pending client-gone callbacks run, output is flushed,
// timers are re-armed, and a closed connection is destroyed. So nothing deletes a connection
// while one of its frames is on the stack.

class HttpServer::Connection final : public ParserListener {
 public:
  explicit Connection(HttpServer* server);
  ~Connection() override;

  void start(std::shared_ptr<const PeerIdentity> peer);
  /// Answers 503 at once (no room for this connection), then closes.
  void refuse();
  /// Nothing in flight, partly received, buffered or unparsed: may be closed to admit another
  /// client.
  bool evictable() const {
    return idleForClose() && pending_input_.empty() && !lingering_ && !shutdown_started_;
  }
  void settle();
  /// `peer_reset`: the peer reset the connection (ECONNRESET / EPIPE), so the last response
  /// written was not read.
  void closeNow(bool peer_reset = false);
  /// The client has hung up and we only wait to see whether it reset (awaitReset()); it still
  /// holds a slot of its listener's budget.
  bool awaitingReset() const { return !closed_ && reset_deadline_us_ != 0; }
  /// Ends that wait now (a full listener needs the slot): the answer counts as undelivered only
  /// if the reset has already arrived.
  void endResetWait() { closeNow(peerReset()); }
  /// The peer closed its end, and the EOF waits unread in the socket (it is read on a later
  /// turn). Callers about to hand out something the client must act on (a lock grant) check it.
  bool peerHungUp() const;
  /// Output the kernel has not taken yet (buffered, or a write in progress).
  bool hasUnwrittenOutput() const { return !closed_ && (!out_.empty() || writing_); }
  bool idleForClose() const {
    return !closed_ && queue_.empty() && !parser_.inMessage() && out_.empty() && !writing_;
  }

  // Input.
  void readStart();
  void readStop();
  void onRead(ssize_t nread);
  void onPeerClosed(ssize_t nread);
  /// Parses and dispatches requests from `data`; returns the bytes used. Less than `len` when
  /// back-pressure or the turn's budget stopped it (reading is then stopped; the caller keeps
  /// the rest for maybeResumeReading()).
  size_t parseInput(const char* data, size_t len);
  void dispatch(ParsedRequest parsed);
  void queueError(int status, std::string_view code, std::string message,
                  HeaderList extra_headers = {});
  void maybeResumeReading();
  bool pipelineFull() const;
  /// True once this connection has used its share of the current loop turn.
  bool turnBudgetSpent();
  void scheduleResume();

  // ParserListener.
  void onRequestBegin() override;
  void onRequestHead(Request& request, bool expect_continue) override;

  // Output.
  size_t outputBacklog() const {
    return out_.size() + (writing_ && write_ != nullptr ? write_->data.size() : 0);
  }
  /// outputBacklog() and the answers buffered behind an unfinished one.
  size_t unwrittenBytes() const {
    size_t n = outputBacklog();
    for (const auto& ex : queue_) n += ex->pending_.size();
    return n;
  }
  /// Brings this connection's share of HttpServer::unwritten_bytes_ up to date.
  void countUnwritten();
  /// Whether a chunk of `n` more bytes goes past the stream backlog limits
  /// (ServerOptions::max_stream_backlog_bytes, max_unwritten_bytes).
  bool streamBacklogFull(size_t n) const;
  bool isHead(const Exchange* ex) const { return !queue_.empty() && queue_.front().get() == ex; }
  std::string& outputFor(Exchange* ex) {
    if (!isHead(ex)) return ex->pending_;
    delivery_watch_.reset();  // these bytes follow the watched response
    return out_;
  }
  bool decideClose(Exchange* ex);
  void respond(Exchange* ex, int status, std::string_view content_type, std::string body,
               const HeaderList& extra_headers);
  void startStream(Exchange* ex, int status, std::string_view content_type);
  void writeChunk(Exchange* ex, std::string_view data);
  void endStream(Exchange* ex);
  /// The response is complete: no longer in flight, no client-gone callback; move the queue on.
  void finish(Exchange* ex);
  void advance();
  void detach(Exchange* ex);
  void flush();
  void onWriteDone(int status);
  void startShutdown();

  // Delivery of the last response (Responder::onUndelivered).
  /// Posts the exchange's undelivered callback, if it has one.
  void reportUndelivered(Exchange* ex);
  /// TCP only: the kernel saw a reset from the peer (the socket is in TCP_CLOSE).
  bool peerReset() const;
  /// The peer closed its end after the watched response was written: keep the socket a while
  /// and look for the reset that says the response was never read.
  void awaitReset();

  // Timers.
  void armTimer();
  void onTimer();

  HttpServer* server_;
  event::ClientStream stream_;
  RequestParser parser_;
  std::shared_ptr<const PeerIdentity> peer_;
  // Admission accounting (HttpServer::countIn / countOut).
  ConnectionBudget* budget_ = nullptr;  // null: not counted (refused, or not yet admitted)
  std::string peer_key_;                // counted in budget_->per_peer when non-empty
  bool stream_hold_ = false;            // counted in budget_->stream_holds instead
  bool refusing_ = false;               // counted in HttpServer::refusing_
  int64_t idle_since_us_ = 0;           // 0 while busy
  bool counted_ = false;
  size_t counted_unwritten_ = 0;  // this connection's part of HttpServer::unwritten_bytes_

  std::string pending_input_;  // unparsed bytes held while the pipeline is full
  size_t pending_offset_ = 0;  // how much of pending_input_ is parsed

  // Dispatched, in request order. A vector, not a deque: libstdc++'s deque allocates ~600 bytes
  // up front, and most connections (a waiter's, say) never have more than one request here.
  std::vector<std::shared_ptr<Exchange>> queue_;
  std::shared_ptr<Exchange> answered_;  // the last one popped from queue_

  bool reading_ = false;
  bool parsing_active_ = false;
  bool input_done_ = false;         // no further request will be parsed
  bool close_after_write_ = false;  // shut down once the queue is empty and output written
  bool peer_eof_ = false;
  bool shutdown_started_ = false;
  bool lingering_ = false;
  bool closed_ = false;
  event::ReentryDepth depth_;        // frames of this connection on the stack (Guard)
  event::ScopedTimer resume_timer_;  // deferred maybeResumeReading()
  uint64_t budget_turn_ = 0;         // the HttpServer::turn_ requests_this_turn_ counts in
  int requests_this_turn_ = 0;

  // The last response written to out_ whose handler wants to know if it is not delivered; reset
  // as soon as any other byte follows it (only the last bytes written are surely unread when
  // the peer resets).
  std::shared_ptr<Exchange> delivery_watch_;
  int64_t reset_deadline_us_ = 0;  // awaitReset(): give up (no reset: maybe read) at this time
  int64_t reset_check_us_ = 0;     // awaitReset(): look at the socket again at this time

  std::string out_;
  WriteReq* write_ = nullptr;
  bool writing_ = false;
  bool flush_queued_ = false;  // in HttpServer::flush_queue_

  event::ScopedTimer timer_;
  int64_t timer_at_us_ = 0;
  int64_t header_deadline_us_ = 0;
  int64_t idle_deadline_us_ = 0;
  int64_t write_deadline_us_ = 0;
  int64_t linger_deadline_us_ = 0;
};

// One frame of a connection on the stack (event::ReentryScope): the outermost one, once counted
// out, settles the connection, which may delete it.
struct HttpServer::Guard {
  explicit Guard(Connection* c) : scope_(c->depth_, event::SettleWhen::kAfterLeaving, Settle{c}) {}

 private:
  struct Settle {
    Connection* c;
    void operator()() const { c->settle(); }  // may delete c
  };
  event::ReentryScope<Settle> scope_;
};

/// Who is connected on `stream` (SO_PEERCRED on a Unix socket, the peer address on TCP).
PeerIdentity identifyPeer(uv_stream_t* stream);

}  // namespace sidelock::http
