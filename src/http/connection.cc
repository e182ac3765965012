#include "http/connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "http/http_error.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

// After answering with Connection: close we send FIN and keep reading (discarding) for a while:
// closing with unread input would send RST, and the client could lose our final response.
constexpr int64_t kLingerMs = 2000;
// After a peer's EOF, how long to look for the reset that proves the last response unread, and
// how often. On loopback the reset follows within microseconds; on a LAN within a round trip.
constexpr int64_t kResetWaitMs = 200;
constexpr int64_t kResetPollMs = 5;

/// Errors by which the peer tells that it did not read what we sent.
bool isPeerReset(ssize_t status) { return status == UV_ECONNRESET || status == UV_EPIPE; }
// Responses buffered for a client beyond this stop the reading of its further requests until it
// reads some: every request answered at once never fills the pipeline, so without this a client
// that pipelines and never reads would grow our output without bound. Small, because loopback
// socket buffers absorb megabytes: this also bounds the bytes one connection produces per turn.
constexpr size_t kMaxOutputBacklog = 64 * 1024;
// Requests one connection may have parsed and dispatched per loop turn. A client pipelining
// thousands of requests would otherwise be served to the end of its input before the loop polls
// again, and renewals, probes and every other client would wait (issue 11, finding 1).
constexpr int kRequestsPerTurn = 8;

ParserLimits parserLimits(const ServerOptions& limits) {
  ParserLimits p;
  p.max_header_bytes = static_cast<size_t>(std::max(0, limits.max_header_bytes));
  p.max_body_bytes = static_cast<size_t>(std::max(0, limits.max_body_bytes));
  return p;
}

}  // namespace

PeerIdentity identifyPeer(uv_stream_t* stream) {
  PeerIdentity peer;
  if (stream == nullptr) return peer;
  if (stream->type == UV_TCP) {
    peer.transport = PeerIdentity::Transport::kTcp;
    sockaddr_storage addr{};
    int len = sizeof(addr);
    if (uv_tcp_getpeername(reinterpret_cast<uv_tcp_t*>(stream), reinterpret_cast<sockaddr*>(&addr),
                           &len) == 0) {
      char ip[INET6_ADDRSTRLEN] = {};
      if (addr.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
        uv_ip4_name(in, ip, sizeof(ip));
        peer.port = ntohs(in->sin_port);
      } else if (addr.ss_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
        uv_ip6_name(in6, ip, sizeof(ip));
        peer.port = ntohs(in6->sin6_port);
      }
      peer.address = ip;
    }
    return peer;
  }
  if (stream->type == UV_NAMED_PIPE) {
    peer.transport = PeerIdentity::Transport::kUnix;
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<const uv_handle_t*>(stream), &fd) != 0) return peer;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof(cred)) {
      peer.has_credentials = true;
      peer.uid = cred.uid;
      peer.gid = cred.gid;
      peer.pid = cred.pid;
    }
  }
  return peer;
}

HttpServer::Connection::Connection(HttpServer* server)
    : server_(server), parser_(parserLimits(server->limits_), this) {}

HttpServer::Connection::~Connection() {
  if (write_ != nullptr) {
    if (writing_) {
      write_->orphaned = true;
    } else {
      delete write_;
    }
  }
  stream_.close();
  if (counted_) server_->metrics_.http_connections.Decrement();
}

bool HttpServer::Connection::peerHungUp() const {
  if (closed_ || !stream_) return true;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(stream_.get()), &fd) != 0) return false;
  char byte;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool HttpServer::Exchange::clientConnected() const {
  return !gone_ && (conn_ == nullptr || !conn_->peerHungUp());
}

void HttpServer::Connection::start(std::shared_ptr<const PeerIdentity> peer) {
  peer_ = std::move(peer);
  counted_ = true;
  server_->metrics_.http_connections.Increment();
  // The first request must start arriving within the header timeout (slowloris).
  header_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.header_timeout_ms * 1000;
  readStart();
}

void HttpServer::Connection::refuse() {
  // Answered before its request is read: a reset would look like a crash to the client, a 503
  // says "busy, come back". The request, if any, is read and discarded while lingering.
  queueError(503, kTooManyConnections, "too many connections; try again later",
             {{"Retry-After", "1"}});
}

// --- input -------------------------------------------------------------------------------------

void HttpServer::Connection::readStart() {
  if (reading_ || closed_ || peer_eof_) return;
  int rc = uv_read_start(
      stream_.get(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* c = static_cast<Connection*>(h->data);
        if (c == nullptr) {
          *buf = uv_buf_init(nullptr, 0);
          return;
        }
        std::vector<char>& b = c->server_->read_buffer_;
        *buf = uv_buf_init(b.data(), static_cast<unsigned>(b.size()));
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t*) {
        auto* c = static_cast<Connection*>(s->data);
        if (c != nullptr) c->onRead(nread);
      });
  if (rc != 0) {
    closeNow();
    return;
  }
  reading_ = true;
}

void HttpServer::Connection::readStop() {
  if (!reading_) return;
  if (stream_) uv_read_stop(stream_.get());
  reading_ = false;
}

void HttpServer::Connection::onRead(ssize_t nread) {
  Guard guard(this);
  if (closed_ || nread == 0) return;
  if (nread < 0) {
    onPeerClosed(nread);
    return;
  }
  // After the last request (Connection: close, an error, draining) input is read only to notice
  // the client leaving, and discarded.
  if (lingering_ || input_done_) return;
  const char* data = server_->read_buffer_.data();
  const size_t len = static_cast<size_t>(nread);
  const size_t used = parseInput(data, len);
  if (used < len) {
    pending_input_.assign(data + used, len - used);
    pending_offset_ = 0;
  }
}

void HttpServer::Connection::onPeerClosed(ssize_t nread) {
  peer_eof_ = true;
  reading_ = false;  // libuv stops reading by itself on EOF and errors
  if (lingering_ || nread != UV_EOF || parser_.inMessage() || !queue_.empty()) {
    // Errors, or EOF before every request was answered: the client is gone (a half-closed
    // client counts as gone, so waiters behind it leave their queues).
    closeNow(isPeerReset(nread));
    return;
  }
  // Everything was answered; finish writing what is buffered, then close.
  input_done_ = true;
  close_after_write_ = true;
}

bool HttpServer::Connection::pipelineFull() const {
  const size_t max_pipelined =
      static_cast<size_t>(std::max(1, server_->limits_.max_pipelined_requests));
  return queue_.size() >= max_pipelined || outputBacklog() >= kMaxOutputBacklog;
}

bool HttpServer::Connection::turnBudgetSpent() {
  if (budget_turn_ != server_->turn_) {
    budget_turn_ = server_->turn_;
    requests_this_turn_ = 0;
  }
  return requests_this_turn_ >= kRequestsPerTurn;
}

size_t HttpServer::Connection::parseInput(const char* data, size_t len) {
  parsing_active_ = true;
  size_t used = 0;
  while (used < len && !closed_ && !input_done_) {
    if (pipelineFull() || turnBudgetSpent()) {
      // Back-pressure: the caller keeps the rest unparsed, and reading stops until responses go
      // out (a full pipeline) or the next loop turn (this turn's budget is spent; see
      // scheduleResume()).
      readStop();
      parsing_active_ = false;
      return used;
    }
    RequestParser::FeedResult r = parser_.feed(data + used, len - used);
    if (r.error) {
      header_deadline_us_ = 0;
      const ParseError& e = parser_.error();
      queueError(e.status, e.code, e.message);
      break;
    }
    used += r.consumed;
    if (r.upgrade) input_done_ = true;
    if (r.request_ready) dispatch(parser_.takeRequest());
    if (!r.request_ready && !r.upgrade) break;  // all of the input is inside a request
  }
  parsing_active_ = false;
  return len;  // parsed, or dropped with the connection's input
}

void HttpServer::Connection::dispatch(ParsedRequest parsed) {
  header_deadline_us_ = 0;
  auto ex = std::make_shared<Exchange>(this);
  ex->request = std::move(parsed.request);
  ex->request.peer = peer_;
  ex->request.loop_turn = server_->turn_;
  ex->keep_alive_ = parsed.keep_alive;
  ex->framing_.http10 = parsed.http10;
  ex->framing_.head_method = parsed.head_method;
  if (!ex->keep_alive_ || server_->draining_) input_done_ = true;
  queue_.push_back(ex);
  ex->in_flight_ = true;
  ++requests_this_turn_;
  server_->addInFlight(1);
  server_->handler_(ex->request, ex);
  if (ex->state_ == Exchange::State::kWaiting) {
    // A request that waits (a queued acquire: thousands of them) keeps only what the answer needs
    // (route and arrival time for the metrics). Handlers read headers and body during the call
    // (Handler's contract) and copy what they need later.
    std::vector<std::pair<std::string, std::string>>().swap(ex->request.headers);
    std::string().swap(ex->request.body);
  }
}
void HttpServer::Connection::queueError(int status, std::string_view code, std::string message,
                                        HeaderList extra_headers) {
  input_done_ = true;
  auto ex = std::make_shared<Exchange>(this);
  ex->keep_alive_ = false;
  ex->request.route = kUnmatchedRoute;
  ex->request.received_us = server_->scheduler_.nowUs();
  queue_.push_back(ex);
  sendError(*ex, status, code, message, std::move(extra_headers));
}

void HttpServer::Connection::maybeResumeReading() {
  if (closed_ || input_done_ || parsing_active_ || peer_eof_ || lingering_) return;
  if (pipelineFull()) return;
  if (!pending_input_.empty()) {
    // Parsed in place: a pipelined backlog is consumed a budget at a time, so copying the rest
    // on every turn would cost its size squared.
    pending_offset_ += parseInput(pending_input_.data() + pending_offset_,
                                  pending_input_.size() - pending_offset_);
    if (closed_) return;
    if (pending_offset_ < pending_input_.size() && !input_done_) return;
    pending_input_.clear();
    pending_offset_ = 0;
    if (input_done_) return;
  }
  readStart();
}

// --- parser events -------------------------------------------------------------------------------

void HttpServer::Connection::onRequestBegin() {
  idle_since_us_ = 0;
  if (answered_ != nullptr && answered_.use_count() == 1) {
    // Nobody holds the last answered exchange any more: its request's storage serves this one.
    parser_.recycle(std::move(answered_->request));
  }
  answered_.reset();
  idle_deadline_us_ = 0;
  header_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.header_timeout_ms * 1000;
}

void HttpServer::Connection::onRequestHead(Request& request, bool expect_continue) {
  const int64_t now = server_->scheduler_.nowUs();
  request.received_us = now;
  // The body must follow within the same budget as the head.
  header_deadline_us_ = now + server_->limits_.header_timeout_ms * 1000;
  if (expect_continue && queue_.empty()) {
    delivery_watch_.reset();
    out_ += kContinueResponse;
  }
}

// --- output ----------------------------------------------------------------------------------

bool HttpServer::Connection::decideClose(Exchange* ex) {
  bool close = !ex->keep_alive_ || ex->framing_.close;
  if (server_->draining_) {
    input_done_ = true;
    // The last queued response tells the client this connection ends.
    if (!queue_.empty() && queue_.back().get() == ex) close = true;
  }
  return close;
}

void HttpServer::Connection::finish(Exchange* ex) {
  if (ex->in_flight_) {
    ex->in_flight_ = false;
    server_->addInFlight(-1);
  }
  ex->state_ = Exchange::State::kDone;
  ex->gone_cb_ = nullptr;
  advance();
}

void HttpServer::Connection::respond(Exchange* ex, int status, std::string_view content_type,
                                     std::string body, const HeaderList& extra) {
  ex->framing_.close = decideClose(ex) || asksToClose(extra);
  appendResponse(outputFor(ex), ex->framing_, status, content_type, body, extra);
  server_->recordResponse(ex->request.route, status, ex->request.received_us);
  finish(ex);
}

void HttpServer::Connection::startStream(Exchange* ex, int status, std::string_view content_type) {
  if (ex->framing_.head_method) {
    // HEAD: the head a GET gets, and no body, so the exchange is complete and the connection
    // goes on with the next request. The handler sees its client gone (clientConnected() is
    // false): nothing waits on a stream nobody will read.
    ex->framing_.close = decideClose(ex);
    appendStreamHead(outputFor(ex), ex->framing_, status, content_type);
    server_->recordResponse(ex->request.route, status, ex->request.received_us);
    ex->gone_ = true;
    finish(ex);
    return;
  }
  // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
  server_->enterStreamHold(this);
  ex->framing_.close = decideClose(ex) || ex->framing_.http10;
  appendStreamHead(outputFor(ex), ex->framing_, status, content_type);
  server_->recordResponse(ex->request.route, status, ex->request.received_us);
  ex->state_ = Exchange::State::kStreaming;
  advance();
}

void HttpServer::Connection::writeChunk(Exchange* ex, std::string_view data) {
  if (data.empty() || ex->framing_.head_method) return;
  if (streamBacklogFull(data.size())) {
    // The reader fell too far behind (stopped, paused, or slower than the lock changes): end
    // its stream rather than buffer for it. The client sees the connection close; the handler
    // its client gone (a stream hold's lease is released).
    SL_LOG(kInfo, "http.slow_stream_closed", {"peer", peer_ ? peer_->key() : std::string()},
           {"route", ex->request.route}, {"unwritten_bytes", unwrittenBytes()});
    server_->metrics_.http_slow_streams_closed.Increment();
    closeNow();
    return;
  }
  appendChunk(outputFor(ex), ex->framing_, data);
  advance();
}

bool HttpServer::Connection::streamBacklogFull(size_t n) const {
  const ServerOptions& limits = server_->limits_;
  const size_t mine = unwrittenBytes();
  // A chunk is always taken while little waits (a reader that keeps up: what the kernel took at
  // once, or one large chunk, as a drained stream's last answer); a reader already behind is
  // cut off past its own cap, or past the server's budget, which is not spent on the others.
  if (mine <= kMaxOutputBacklog) return false;
  if (mine + n > limits.max_stream_backlog_bytes) return true;
  const size_t others = server_->unwritten_bytes_ - counted_unwritten_;
  return others + mine + n > limits.max_unwritten_bytes;
}

void HttpServer::Connection::countUnwritten() {
  const size_t now = closed_ ? 0 : unwrittenBytes();
  server_->unwritten_bytes_ = server_->unwritten_bytes_ - counted_unwritten_ + now;
  counted_unwritten_ = now;
}

void HttpServer::Connection::endStream(Exchange* ex) {
  server_->leaveStreamHold(this);
  appendStreamEnd(outputFor(ex), ex->framing_);
  finish(ex);
}

void HttpServer::Connection::advance() {
  while (!queue_.empty()) {
    Exchange* head = queue_.front().get();
    if (!head->pending_.empty()) {
      delivery_watch_.reset();
      out_ += head->pending_;
      head->pending_.clear();
    }
    if (head->state_ != Exchange::State::kDone) break;
    bool close = head->framing_.close;
    head->conn_ = nullptr;
    answered_ = std::move(queue_.front());
    // Its bytes are the last in out_ now.
    if (answered_->undelivered_cb_) delivery_watch_ = answered_;
    queue_.erase(queue_.begin());
    if (close) {
      close_after_write_ = true;
      input_done_ = true;
      // Requests pipelined behind a closing response will never be answered.
      while (!queue_.empty()) {
        detach(queue_.front().get());
        queue_.erase(queue_.begin());
      }
      break;
    }
  }
  scheduleResume();
}

void HttpServer::Connection::scheduleResume() {
  // Parsing more input dispatches handlers; advance() runs inside a responder call (send()),
  // and a handler must never run inside another handler's send(). Resume on a later turn, and
  // only when it can make progress (or the resume would just re-arm itself every turn).
  if (pending_input_.empty() && reading_) return;
  if (resume_timer_.pending() || closed_ || input_done_ || peer_eof_ || lingering_) return;
  if (pipelineFull()) return;
  resume_timer_.start(server_->scheduler_, 0, [this] {
    Guard guard(this);
    maybeResumeReading();
  });
}

void HttpServer::Connection::detach(Exchange* ex) {
  ex->conn_ = nullptr;
  if (ex->state_ == Exchange::State::kDone) return;
  ex->gone_ = true;
  if (ex->in_flight_) {
    ex->in_flight_ = false;
    server_->addInFlight(-1);
  }
  if (ex->gone_cb_) {
    // Posted, never run inside whatever call noticed the loss (a send() of another response,
    // close()): the owner may be iterating its own waiter lists right now.
    server_->scheduler_.post(std::move(ex->gone_cb_));
    ex->gone_cb_ = nullptr;
  }
}

void HttpServer::Connection::flush() {
  if (closed_ || writing_ || out_.empty()) return;
  // Most responses fit the socket buffer: try a direct write before queueing a uv_write.
  uv_buf_t buf = uv_buf_init(out_.data(), static_cast<unsigned>(out_.size()));
  int n = uv_try_write(stream_.get(), &buf, 1);
  if (n == UV_EAGAIN || n == UV_ENOSYS) n = 0;
  if (n < 0) {
    closeNow(isPeerReset(n));
    return;
  }
  if (static_cast<size_t>(n) == out_.size()) {
    out_.clear();
    return;
  }
  if (write_ == nullptr) {
    write_ = new WriteReq;
    write_->req.data = write_;
  }
  write_->data.assign(out_, static_cast<size_t>(n));
  out_.clear();
  uv_buf_t wbuf = uv_buf_init(write_->data.data(), static_cast<unsigned>(write_->data.size()));
  int rc = uv_write(&write_->req, stream_.get(), &wbuf, 1, [](uv_write_t* req, int status) {
    auto* w = static_cast<WriteReq*>(req->data);
    if (w->orphaned) {
      delete w;
      return;
    }
    auto* c = static_cast<Connection*>(req->handle->data);
    if (c != nullptr) c->onWriteDone(status);
  });
  if (rc != 0) {
    closeNow(isPeerReset(rc));
    return;
  }
  writing_ = true;
  write_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.write_timeout_ms * 1000;
}

void HttpServer::Connection::onWriteDone(int status) {
  Guard guard(this);
  writing_ = false;
  write_deadline_us_ = 0;
  write_->data.clear();
  if (status < 0) closeNow(isPeerReset(status));
  // settle() flushes what accumulated meanwhile.
}

void HttpServer::Connection::startShutdown() {
  if (shutdown_started_ || closed_) return;
  shutdown_started_ = true;
  if (peer_eof_) {
    if (delivery_watch_ && peer_) {
      awaitReset();
      return;
    }
    closeNow();
    return;
  }
  auto* req = new uv_shutdown_t{};
  int rc = uv_shutdown(req, stream_.get(), [](uv_shutdown_t* r, int status) {
    auto* c = static_cast<Connection*>(r->handle->data);
    delete r;
    if (c != nullptr && status < 0) {
      Guard guard(c);
      c->closeNow();
    }
  });
  if (rc != 0) {
    delete req;
    closeNow();
    return;
  }
  lingering_ = true;
  linger_deadline_us_ = server_->scheduler_.nowUs() + kLingerMs * 1000;
  readStart();  // to see the client's EOF (reading may have stopped for back-pressure)
}

void HttpServer::Connection::closeNow(bool peer_reset) {
  if (closed_) return;
  closed_ = true;
  countUnwritten();  // none now
  server_->countOut(this);
  // Answers still queued behind an unfinished one never left pending_; the last one written
  // was not read if the peer reset, and not (wholly) sent if output is left.
  for (auto& ex : queue_) {
    if (ex->state_ == Exchange::State::kDone) reportUndelivered(ex.get());
  }
  if (delivery_watch_ && (peer_reset || !out_.empty() || writing_)) {
    reportUndelivered(delivery_watch_.get());
  }
  delivery_watch_.reset();
  reset_deadline_us_ = reset_check_us_ = 0;
  if (writing_) {
    write_->orphaned = true;  // the pending write's callback frees it
    write_ = nullptr;
    writing_ = false;
  }
  timer_.reset();
  resume_timer_.reset();
  timer_at_us_ = 0;
  reading_ = false;
  stream_.close();
  for (auto& ex : queue_) detach(ex.get());
  queue_.clear();
  answered_.reset();
  pending_input_.clear();
  pending_offset_ = 0;
  parser_.abandonMessage();
}

void HttpServer::Connection::settle() {
  // depth_ is 0 here: no frame of this connection is on the stack.
  countUnwritten();
  if (!closed_ && !out_.empty() && !writing_) server_->queueFlush(this);
  // Output drained below the backlog limit: read the client's further requests again.
  if (!closed_) scheduleResume();
  if (!closed_) {
    const bool nothing_left = queue_.empty() && !parser_.inMessage() && out_.empty() && !writing_;
    if (nothing_left && server_->draining_) close_after_write_ = true;
    if (nothing_left && close_after_write_) startShutdown();
    if (!closed_) {
      if (nothing_left && !lingering_) {
        if (idle_deadline_us_ == 0) {
          idle_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.idle_timeout_ms * 1000;
        }
        if (idle_since_us_ == 0) idle_since_us_ = server_->scheduler_.nowUs();
      } else {
        idle_deadline_us_ = 0;
        idle_since_us_ = 0;
      }
    }
  }
  if (closed_) {
    HttpServer* server = server_;
    server->destroyConnection(this);  // deletes this
    server->checkDrained();
    return;
  }
  armTimer();
  server_->checkDrained();
}

// --- delivery of the last response ---------------------------------------------------------------

void HttpServer::Connection::reportUndelivered(Exchange* ex) {
  if (!ex->undelivered_cb_) return;
  // Posted like client-gone callbacks: never inside whatever call noticed it.
  server_->scheduler_.post(std::move(ex->undelivered_cb_));
  ex->undelivered_cb_ = nullptr;
}

bool HttpServer::Connection::peerReset() const {
  if (closed_ || !stream_) return false;
  uv_os_fd_t fd = -1;
  if (uv_fileno(reinterpret_cast<const uv_handle_t*>(stream_.get()), &fd) != 0) return false;
  if (peer_ != nullptr && peer_->transport == PeerIdentity::Transport::kUnix) {
    // A Unix socket whose peer closes with data unread gets ECONNRESET as its pending error
    // (Linux, unix_release_sock); after a close that read everything there is none.
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) return false;
    return error == ECONNRESET;
  }
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  return info.tcpi_state == TCP_CLOSE;  // after EOF alone it would be TCP_CLOSE_WAIT
}

void HttpServer::Connection::awaitReset() {
  if (peerReset()) {
    closeNow(/*peer_reset=*/true);
    return;
  }
  const int64_t now = server_->scheduler_.nowUs();
  reset_deadline_us_ = now + kResetWaitMs * 1000;
  reset_check_us_ = now + kResetPollMs * 1000;
}

// --- timers ----------------------------------------------------------------------------------

void HttpServer::Connection::armTimer() {
  int64_t earliest = 0;
  for (int64_t d : {header_deadline_us_, idle_deadline_us_, write_deadline_us_, linger_deadline_us_,
                    reset_check_us_}) {
    if (d != 0 && (earliest == 0 || d < earliest)) earliest = d;
  }
  // Deadlines move on every request; re-arming only when one moves earlier keeps the timer
  // heap quiet. A timer that fires early (or finds no deadline left) re-checks and re-arms.
  if (earliest == 0 || (timer_.pending() && timer_at_us_ <= earliest)) return;
  // Never armed further than one header timeout ahead: the next request's header deadline then
  // cannot come before the armed time, so a busy keep-alive connection does not re-arm per request.
  const int64_t now = server_->scheduler_.nowUs();
  const int64_t wake_at = std::min(earliest, now + server_->limits_.header_timeout_ms * 1000);
  int64_t delay_us = wake_at - now;
  int64_t delay_ms = delay_us <= 0 ? 0 : (delay_us + 999) / 1000;
  timer_at_us_ = wake_at;
  timer_.start(server_->scheduler_, delay_ms, [this] {
    timer_at_us_ = 0;
    onTimer();
  });
}

void HttpServer::Connection::onTimer() {
  Guard guard(this);
  if (closed_) return;
  const int64_t now = server_->scheduler_.nowUs();
  auto due = [now](int64_t deadline) { return deadline != 0 && deadline <= now; };
  if (reset_deadline_us_ != 0) {
    if (peerReset()) {
      closeNow(/*peer_reset=*/true);
    } else if (due(reset_deadline_us_)) {
      closeNow();  // no reset: the client may have read the answer, so it stands
    } else if (due(reset_check_us_)) {
      reset_check_us_ = now + kResetPollMs * 1000;
    }
    return;
  }
  if (due(linger_deadline_us_) || due(write_deadline_us_)) {
    // A client that does not read our responses (or our FIN) is dropped.
    closeNow();
    return;
  }
  if (due(header_deadline_us_)) {
    header_deadline_us_ = 0;
    if (parser_.inMessage()) {
      parser_.abandonMessage();
      queueError(408, kRequestTimeout,
                 "request not received within " +
                     std::to_string(server_->limits_.header_timeout_ms) + " ms");
    } else if (queue_.empty()) {
      closeNow();  // connected and sent nothing
    }
    return;
  }
  if (due(idle_deadline_us_)) closeNow();
}

// --- Exchange ----------------------------------------------------------------------------------

void HttpServer::Exchange::send(int status, std::string_view content_type, std::string body,
                                std::vector<std::pair<std::string, std::string>> extra_headers) {
  if (state_ != State::kWaiting) return;
  if (conn_ == nullptr) {
    state_ = State::kDone;
    return;
  }
  Guard guard(conn_);
  conn_->respond(this, status, content_type, std::move(body), extra_headers);
}

void HttpServer::Exchange::startStream(int status, std::string_view content_type) {
  if (state_ != State::kWaiting) return;
  if (conn_ == nullptr) {
    state_ = State::kStreaming;
    return;
  }
  Guard guard(conn_);
  conn_->startStream(this, status, content_type);
}

bool HttpServer::Exchange::writeChunk(std::string_view data) {
  if (state_ != State::kStreaming || conn_ == nullptr) return false;
  Guard guard(conn_);
  conn_->writeChunk(this, data);
  return !gone_;
}

void HttpServer::Exchange::endStream() {
  if (state_ != State::kStreaming) return;
  if (conn_ == nullptr) {
    state_ = State::kDone;
    return;
  }
  Guard guard(conn_);
  conn_->endStream(this);
}

}  // namespace sidelock::http
