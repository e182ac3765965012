#include "http/server.h"

#include <llhttp.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "http/http_error.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

constexpr int kListenBacklog = 511;
// After answering with Connection: close we send FIN and keep reading (discarding) for a while:
// closing with unread input would send RST, and the client could lose our final response.
constexpr int64_t kLingerMs = 2000;
constexpr size_t kReadBufferSize = 64 * 1024;
// Responses buffered for a client beyond this stop the reading of its further requests until it
// reads some: every request answered at once never fills the pipeline, so without this a client
// that pipelines and never reads would grow our output without bound.
constexpr size_t kMaxOutputBacklog = 256 * 1024;
// Request line framing ("GET  HTTP/1.1\r\n") and per-header ": " + CRLF, counted toward
// max_header_bytes on top of the url, names and values llhttp hands us.
constexpr size_t kRequestLineOverhead = 16;
constexpr size_t kHeaderOverhead = 4;
// Room for a typical client's headers (Host, Content-Type, Content-Length, User-Agent, Accept...)
// in one allocation; more only grow the vector.
constexpr size_t kExpectedHeaders = 8;

// The bytes of one uv_write and its request, reused for the connection's life. If the
// connection closes while a write is pending, it is orphaned and the write callback frees it.
struct WriteReq {
  uv_write_t req{};
  std::string data;
  bool orphaned = false;
};

void appendNumber(std::string& out, uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, r.ptr);
}

void appendHex(std::string& out, uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value, 16);
  out.append(buf, r.ptr);
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

}  // namespace

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

  Request request;
  Connection* conn_;  // null once written out or detached; later calls are then no-ops
  State state_ = State::kWaiting;
  std::string pending_;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_method_ = false;  // a response to HEAD carries no body (RFC 9110 9.3.2)
  bool close_after_ = false;
  bool in_flight_ = false;  // counted in HttpServer::in_flight_
  bool gone_ = false;
  std::function<void()> gone_cb_;
};

// ---------------------------------------------------------------------------------------------
// Connection. Every entry point (uv callbacks, timers, responder calls, server calls) holds a
// Guard; when the outermost Guard exits, pending client-gone callbacks run, output is flushed,
// timers are re-armed, and a closed connection is destroyed. So nothing deletes a connection
// while one of its frames is on the stack.

class HttpServer::Connection {
 public:
  explicit Connection(HttpServer* server) : server_(server) {}
  ~Connection() {
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

  void start();
  void settle();
  void closeNow();
  /// The peer closed its end, and the EOF waits unread in the socket (it is read on a later
  /// turn). Callers about to hand out something the client must act on (a lock grant) check it.
  bool peerHungUp() const {
    if (closed_ || !stream_) return true;
    uv_os_fd_t fd = -1;
    if (uv_fileno(reinterpret_cast<const uv_handle_t*>(stream_.get()), &fd) != 0) return false;
    char byte;
    return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  bool idleForClose() const {
    return !closed_ && queue_.empty() && !in_message_ && out_.empty() && !writing_;
  }

  // Input.
  void readStart();
  void readStop();
  void onRead(ssize_t nread);
  void onPeerClosed(ssize_t nread);
  void parseInput(const char* data, size_t len);
  void dispatch();
  void parseError(llhttp_errno_t err);
  void queueError(int status, std::string_view code, std::string message);
  void maybeResumeReading();
  bool pipelineFull() const;
  void scheduleResume();

  // llhttp callbacks.
  int onMessageBegin();
  int onUrl(const char* at, size_t len);
  int onHeaderField(const char* at, size_t len);
  int onHeaderValue(const char* at, size_t len);
  int onHeaderValueComplete();
  int onHeadersComplete();
  int onBody(const char* at, size_t len);
  int onMessageComplete();
  int addHeadBytes(size_t n);
  int fail(int status, std::string_view code, std::string message);

  // Output.
  size_t outputBacklog() const {
    return out_.size() + (writing_ && write_ != nullptr ? write_->data.size() : 0);
  }
  bool isHead(const Exchange* ex) const { return !queue_.empty() && queue_.front().get() == ex; }
  std::string& outputFor(Exchange* ex) { return isHead(ex) ? out_ : ex->pending_; }
  bool decideClose(Exchange* ex);
  void appendHead(std::string& out, int status, std::string_view content_type, bool close,
                  bool http10);
  void respond(Exchange* ex, int status, std::string_view content_type, std::string body,
               std::vector<std::pair<std::string, std::string>>& extra_headers);
  void startStream(Exchange* ex, int status, std::string_view content_type);
  void writeChunk(Exchange* ex, std::string_view data);
  void endStream(Exchange* ex);
  void advance();
  void detach(Exchange* ex);
  void flush();
  void onWriteDone(int status);
  void startShutdown();

  // Timers.
  void armTimer();
  void onTimer();

  HttpServer* server_;
  event::ClientStream stream_;
  llhttp_t parser_{};
  bool counted_ = false;

  // Parse state of the request being received.
  std::shared_ptr<Exchange> parsing_;
  std::shared_ptr<Exchange> ready_;  // complete, about to be dispatched
  std::string url_, field_, value_;
  size_t head_bytes_ = 0;
  bool in_message_ = false;
  int err_status_ = 0;
  std::string_view err_code_;
  std::string err_message_;
  std::string pending_input_;  // unparsed bytes held while the pipeline is full

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
  int depth_ = 0;
  event::ScopedTimer resume_timer_;  // deferred maybeResumeReading()

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

struct HttpServer::Guard {
  explicit Guard(Connection* c) : c_(c) { ++c_->depth_; }
  ~Guard() {
    if (--c_->depth_ == 0) c_->settle();  // may delete c_
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  Connection* c_;
};

bool HttpServer::Exchange::clientConnected() const {
  return !gone_ && (conn_ == nullptr || !conn_->peerHungUp());
}

void HttpServer::Connection::start() {
  counted_ = true;
  server_->metrics_.http_connections.Increment();
  static const llhttp_settings_t settings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = [](llhttp_t* p) {
      return static_cast<Connection*>(p->data)->onMessageBegin();
    };
    s.on_url = [](llhttp_t* p, const char* at, size_t len) {
      return static_cast<Connection*>(p->data)->onUrl(at, len);
    };
    s.on_header_field = [](llhttp_t* p, const char* at, size_t len) {
      return static_cast<Connection*>(p->data)->onHeaderField(at, len);
    };
    s.on_header_value = [](llhttp_t* p, const char* at, size_t len) {
      return static_cast<Connection*>(p->data)->onHeaderValue(at, len);
    };
    s.on_header_value_complete = [](llhttp_t* p) {
      return static_cast<Connection*>(p->data)->onHeaderValueComplete();
    };
    s.on_headers_complete = [](llhttp_t* p) {
      return static_cast<Connection*>(p->data)->onHeadersComplete();
    };
    s.on_body = [](llhttp_t* p, const char* at, size_t len) {
      return static_cast<Connection*>(p->data)->onBody(at, len);
    };
    s.on_message_complete = [](llhttp_t* p) {
      return static_cast<Connection*>(p->data)->onMessageComplete();
    };
    return s;
  }();
  llhttp_init(&parser_, HTTP_REQUEST, &settings);
  parser_.data = this;
  // The first request must start arriving within the header timeout (slowloris).
  header_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.header_timeout_ms * 1000;
  readStart();
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
  parseInput(server_->read_buffer_.data(), static_cast<size_t>(nread));
}

void HttpServer::Connection::onPeerClosed(ssize_t nread) {
  peer_eof_ = true;
  reading_ = false;  // libuv stops reading by itself on EOF and errors
  if (lingering_ || nread != UV_EOF || in_message_ || !queue_.empty()) {
    // Errors, or EOF before every request was answered: the client is gone (a half-closed
    // client counts as gone, so waiters behind it leave their queues).
    closeNow();
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

void HttpServer::Connection::parseInput(const char* data, size_t len) {
  parsing_active_ = true;
  while (len > 0 && !closed_ && !input_done_) {
    if (pipelineFull()) {
      // Back-pressure: keep the rest unparsed and stop reading until responses go out.
      pending_input_.append(data, len);
      readStop();
      break;
    }
    llhttp_errno_t err = llhttp_execute(&parser_, data, len);
    if (err == HPE_OK) break;
    if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
      // on_message_complete pauses after each request so it is dispatched outside llhttp.
      const char* pos = llhttp_get_error_pos(&parser_);
      size_t used = pos != nullptr ? static_cast<size_t>(pos - data) : len;
      used = std::min(used, len);
      data += used;
      len -= used;
      if (err == HPE_PAUSED) {
        llhttp_resume(&parser_);
      } else {
        input_done_ = true;  // protocol upgrades are not supported: no more HTTP here
      }
      if (ready_) dispatch();
      continue;
    }
    parseError(err);
    break;
  }
  parsing_active_ = false;
}

void HttpServer::Connection::dispatch() {
  std::shared_ptr<Exchange> ex = std::move(ready_);
  if (!ex->keep_alive_ || server_->draining_) input_done_ = true;
  queue_.push_back(ex);
  ex->in_flight_ = true;
  server_->addInFlight(1);
  server_->handler_(ex->request, ex);
}

void HttpServer::Connection::parseError(llhttp_errno_t err) {
  int status = err_status_ != 0 ? err_status_ : 400;
  std::string_view code = err_status_ != 0 ? err_code_ : kBadRequest;
  std::string message = err_status_ != 0
                            ? std::move(err_message_)
                            : std::string("malformed request: ") + llhttp_errno_name(err) + ": " +
                                  llhttp_get_error_reason(&parser_);
  in_message_ = false;
  header_deadline_us_ = 0;
  parsing_.reset();
  queueError(status, code, std::move(message));
}

void HttpServer::Connection::queueError(int status, std::string_view code, std::string message) {
  input_done_ = true;
  auto ex = std::make_shared<Exchange>(this);
  ex->keep_alive_ = false;
  ex->request.route = kUnmatchedRoute;
  ex->request.received_us = server_->scheduler_.nowUs();
  queue_.push_back(ex);
  sendError(*ex, status, code, message);
}

void HttpServer::Connection::maybeResumeReading() {
  if (closed_ || input_done_ || parsing_active_ || peer_eof_ || lingering_) return;
  if (pipelineFull()) return;
  if (!pending_input_.empty()) {
    std::string data;
    data.swap(pending_input_);
    parseInput(data.data(), data.size());
    if (closed_ || input_done_ || !pending_input_.empty()) return;
  }
  readStart();
}

// --- llhttp callbacks ----------------------------------------------------------------------------

int HttpServer::Connection::fail(int status, std::string_view code, std::string message) {
  err_status_ = status;
  err_code_ = code;
  err_message_ = std::move(message);
  return -1;
}

int HttpServer::Connection::addHeadBytes(size_t n) {
  head_bytes_ += n;
  if (head_bytes_ > static_cast<size_t>(server_->limits_.max_header_bytes)) {
    return fail(431, kHeadersTooLarge,
                "request line and headers exceed " +
                    std::to_string(server_->limits_.max_header_bytes) + " bytes");
  }
  return 0;
}

int HttpServer::Connection::onMessageBegin() {
  parsing_ = std::make_shared<Exchange>(this);
  if (answered_ != nullptr && answered_.use_count() == 1) {
    // Nobody holds the last answered exchange any more: its request's storage serves this one.
    parsing_->request = std::move(answered_->request);
    parsing_->request.clear();
  }
  answered_.reset();
  parsing_->request.headers.reserve(kExpectedHeaders);
  url_.clear();
  field_.clear();
  value_.clear();
  head_bytes_ = 0;
  in_message_ = true;
  idle_deadline_us_ = 0;
  header_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.header_timeout_ms * 1000;
  return addHeadBytes(kRequestLineOverhead);
}

int HttpServer::Connection::onUrl(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  url_.append(at, len);
  return 0;
}

int HttpServer::Connection::onHeaderField(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  field_.append(at, len);
  return 0;
}

int HttpServer::Connection::onHeaderValue(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  value_.append(at, len);
  return 0;
}

int HttpServer::Connection::onHeaderValueComplete() {
  if (int rc = addHeadBytes(kHeaderOverhead); rc != 0) return rc;
  for (char& ch : field_) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  parsing_->request.headers.emplace_back(std::move(field_), std::move(value_));
  field_.clear();
  value_.clear();
  return 0;
}

int HttpServer::Connection::onHeadersComplete() {
  Request& r = parsing_->request;
  r.method = llhttp_method_name(static_cast<llhttp_method_t>(llhttp_get_method(&parser_)));
  std::string_view target = url_;
  // Absolute-form ("http://host/path") is legal from proxies; keep only the path.
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() >= scheme.size() &&
        equalsIgnoreCase(target.substr(0, scheme.size()), scheme)) {
      target.remove_prefix(scheme.size());
      size_t slash = target.find('/');
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  if (target.empty() || target.front() != '/') {
    return fail(400, kBadRequest, "the request target must be an absolute path");
  }
  size_t hash = target.find('#');
  if (hash != std::string_view::npos) target = target.substr(0, hash);
  size_t q = target.find('?');
  if (q != std::string_view::npos) {
    r.query.assign(target.substr(q + 1));
    target = target.substr(0, q);
  }
  r.raw_path.assign(target);
  if (!percentDecode(r.raw_path, &r.path)) {
    return fail(400, kBadRequest, "malformed percent-encoding in the path");
  }
  const int64_t now = server_->scheduler_.nowUs();
  r.received_us = now;
  if ((parser_.flags & F_CONTENT_LENGTH) != 0 &&
      parser_.content_length > static_cast<uint64_t>(server_->limits_.max_body_bytes)) {
    return fail(413, kPayloadTooLarge,
                "body exceeds " + std::to_string(server_->limits_.max_body_bytes) + " bytes");
  }
  // The body must follow within the same budget as the head.
  header_deadline_us_ = now + server_->limits_.header_timeout_ms * 1000;
  // curl sends Expect: 100-continue for larger bodies and would wait a second without this.
  if (parser_.http_major == 1 && parser_.http_minor == 1 && queue_.empty() &&
      equalsIgnoreCase(r.header("expect"), "100-continue")) {
    out_ += "HTTP/1.1 100 Continue\r\n\r\n";
  }
  return 0;
}

int HttpServer::Connection::onBody(const char* at, size_t len) {
  std::string& body = parsing_->request.body;
  if (body.size() + len > static_cast<size_t>(server_->limits_.max_body_bytes)) {
    return fail(413, kPayloadTooLarge,
                "body exceeds " + std::to_string(server_->limits_.max_body_bytes) + " bytes");
  }
  body.append(at, len);
  return 0;
}

int HttpServer::Connection::onMessageComplete() {
  parsing_->keep_alive_ = llhttp_should_keep_alive(&parser_) != 0 && !llhttp_get_upgrade(&parser_);
  parsing_->http10_ = parser_.http_major == 1 && parser_.http_minor == 0;
  parsing_->head_method_ = parser_.method == HTTP_HEAD;
  in_message_ = false;
  header_deadline_us_ = 0;
  ready_ = std::move(parsing_);
  return HPE_PAUSED;
}

// --- output ----------------------------------------------------------------------------------

bool HttpServer::Connection::decideClose(Exchange* ex) {
  bool close = !ex->keep_alive_ || ex->close_after_;
  if (server_->draining_) {
    input_done_ = true;
    // The last queued response tells the client this connection ends.
    if (!queue_.empty() && queue_.back().get() == ex) close = true;
  }
  return close;
}

void HttpServer::Connection::appendHead(std::string& out, int status, std::string_view content_type,
                                        bool close, bool http10) {
  out += "HTTP/1.1 ";
  appendNumber(out, static_cast<uint64_t>(status));
  out += ' ';
  out += reasonPhrase(status);
  out += "\r\nServer: sidelock\r\n";
  if (!content_type.empty()) {
    out += "Content-Type: ";
    out += content_type;
    out += "\r\n";
  }
  if (close) {
    out += "Connection: close\r\n";
  } else if (http10) {
    out += "Connection: keep-alive\r\n";
  }
}

void HttpServer::Connection::respond(Exchange* ex, int status, std::string_view content_type,
                                     std::string body,
                                     std::vector<std::pair<std::string, std::string>>& extra) {
  bool close = decideClose(ex);
  for (const auto& [name, value] : extra) {
    if (equalsIgnoreCase(name, "connection") && equalsIgnoreCase(value, "close")) close = true;
  }
  std::string& out = outputFor(ex);
  appendHead(out, status, content_type, close, ex->http10_);
  out += "Content-Length: ";
  appendNumber(out, body.size());
  out += "\r\n";
  for (const auto& [name, value] : extra) {
    // We own framing headers; a handler's copy would contradict ours.
    if (equalsIgnoreCase(name, "connection") || equalsIgnoreCase(name, "content-length") ||
        equalsIgnoreCase(name, "transfer-encoding")) {
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += "\r\n";
  if (!ex->head_method_) out += body;
  server_->recordResponse(ex->request.route, status, ex->request.received_us);
  if (ex->in_flight_) {
    ex->in_flight_ = false;
    server_->addInFlight(-1);
  }
  ex->close_after_ = close;
  ex->state_ = Exchange::State::kDone;
  ex->gone_cb_ = nullptr;
  advance();
}

void HttpServer::Connection::startStream(Exchange* ex, int status, std::string_view content_type) {
  // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
  bool close = decideClose(ex) || ex->http10_;
  std::string& out = outputFor(ex);
  appendHead(out, status, content_type, close, false);
  if (!ex->http10_) out += "Transfer-Encoding: chunked\r\n";
  out += "\r\n";
  server_->recordResponse(ex->request.route, status, ex->request.received_us);
  ex->close_after_ = close;
  ex->state_ = Exchange::State::kStreaming;
  advance();
}

void HttpServer::Connection::writeChunk(Exchange* ex, std::string_view data) {
  if (data.empty() || ex->head_method_) return;  // an empty chunk would end the stream
  std::string& out = outputFor(ex);
  if (ex->http10_) {
    out += data;
  } else {
    appendHex(out, data.size());
    out += "\r\n";
    out += data;
    out += "\r\n";
  }
  advance();
}

void HttpServer::Connection::endStream(Exchange* ex) {
  if (!ex->http10_ && !ex->head_method_) outputFor(ex) += "0\r\n\r\n";
  if (ex->in_flight_) {
    ex->in_flight_ = false;
    server_->addInFlight(-1);
  }
  ex->state_ = Exchange::State::kDone;
  ex->gone_cb_ = nullptr;
  advance();
}

void HttpServer::Connection::advance() {
  while (!queue_.empty()) {
    Exchange* head = queue_.front().get();
    if (!head->pending_.empty()) {
      out_ += head->pending_;
      head->pending_.clear();
    }
    if (head->state_ != Exchange::State::kDone) break;
    bool close = head->close_after_;
    head->conn_ = nullptr;
    answered_ = std::move(queue_.front());
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
    resume_timer_.markFired();
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
    closeNow();
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
    closeNow();
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
  if (status < 0) closeNow();
  // settle() flushes what accumulated meanwhile.
}

void HttpServer::Connection::startShutdown() {
  if (shutdown_started_ || closed_) return;
  shutdown_started_ = true;
  if (peer_eof_) {
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

void HttpServer::Connection::closeNow() {
  if (closed_) return;
  closed_ = true;
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
  parsing_.reset();
  ready_.reset();
  answered_.reset();
  pending_input_.clear();
  in_message_ = false;
}

void HttpServer::Connection::settle() {
  // depth_ is 0 here: no frame of this connection is on the stack.
  if (!closed_ && !out_.empty() && !writing_) server_->queueFlush(this);
  // Output drained below the backlog limit: read the client's further requests again.
  if (!closed_) scheduleResume();
  if (!closed_) {
    const bool nothing_left = queue_.empty() && !in_message_ && out_.empty() && !writing_;
    if (nothing_left && server_->draining_) close_after_write_ = true;
    if (nothing_left && close_after_write_) startShutdown();
    if (!closed_) {
      if (nothing_left && !lingering_) {
        if (idle_deadline_us_ == 0) {
          idle_deadline_us_ = server_->scheduler_.nowUs() + server_->limits_.idle_timeout_ms * 1000;
        }
      } else {
        idle_deadline_us_ = 0;
      }
    }
  }
  if (closed_) {
    server_->destroyConnection(this);  // deletes this
    return;
  }
  armTimer();
}

// --- timers ----------------------------------------------------------------------------------

void HttpServer::Connection::armTimer() {
  int64_t earliest = 0;
  for (int64_t d :
       {header_deadline_us_, idle_deadline_us_, write_deadline_us_, linger_deadline_us_}) {
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
    timer_.markFired();
    timer_at_us_ = 0;
    onTimer();
  });
}

void HttpServer::Connection::onTimer() {
  Guard guard(this);
  if (closed_) return;
  const int64_t now = server_->scheduler_.nowUs();
  auto due = [now](int64_t deadline) { return deadline != 0 && deadline <= now; };
  if (due(linger_deadline_us_) || due(write_deadline_us_)) {
    // A client that does not read our responses (or our FIN) is dropped.
    closeNow();
    return;
  }
  if (due(header_deadline_us_)) {
    header_deadline_us_ = 0;
    if (in_message_) {
      in_message_ = false;
      parsing_.reset();
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

// --- HttpServer --------------------------------------------------------------------------------

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler,
                       const config::ListenConfig& limits, metrics::Metrics& metrics,
                       Handler handler)
    : loop_(loop),
      scheduler_(scheduler),
      limits_(limits),
      metrics_(metrics),
      handler_(std::move(handler)),
      tcp_(loop),
      unix_(loop),
      read_buffer_(kReadBufferSize) {
  // Only fails on a bad loop pointer.
  if (uv_prepare_init(loop_, flush_prepare_.allocate(this)) != 0) abort();
}

HttpServer::HttpServer(uv_loop_t* loop, event::Scheduler& scheduler,
                       const config::ListenConfig& limits, metrics::Metrics& metrics,
                       const Router& router)
    : HttpServer(loop, scheduler, limits, metrics, router.asHandler()) {}

HttpServer::~HttpServer() {
  close();
  connections_.clear();  // only non-empty if destroyed from inside a handler (a bug upstream)
}

Status HttpServer::start() {
  if (!limits_.tcp.empty()) SIDELOCK_RETURN_IF_ERROR(listenTcp(limits_.tcp));
  if (!limits_.unix_path.empty()) {
    Status s = listenUnix(limits_.unix_path, limits_.unix_mode);
    if (!s.isOk()) {
      tcp_.close();
      return s;
    }
  }
  return Status::ok();
}

Status HttpServer::listenTcp(std::string_view host_port) {
  if (closed_) return unavailable("server is closed");
  return tcp_.listenTcp(host_port, kListenBacklog, [this] { onConnection(tcp_); });
}

Status HttpServer::listenUnix(const std::string& path, uint32_t mode) {
  if (closed_) return unavailable("server is closed");
  return unix_.listenUnix(path, mode, kListenBacklog, [this] { onConnection(unix_); });
}

void HttpServer::onConnection(event::StreamListener& listener) {
  auto connection = std::make_unique<Connection>(this);
  if (!listener.accept(connection->stream_, connection.get()).isOk()) return;
  if (closed_ || connections_.size() >= static_cast<size_t>(std::max(0, limits_.max_connections))) {
    // Accepting and closing at once tells the client "no" instead of leaving it in the backlog.
    metrics_.http_connections_rejected.Increment();
    return;  // the destructor closes the stream
  }
  Connection* c = connection.get();
  connections_.emplace(c, std::move(connection));
  Guard guard(c);
  c->start();
}

void HttpServer::destroyConnection(Connection* connection) {
  if (connection->flush_queued_) std::erase(flush_queue_, connection);
  connections_.erase(connection);
}

void HttpServer::queueFlush(Connection* connection) {
  if (connection->flush_queued_ || !flush_prepare_) return;
  connection->flush_queued_ = true;
  flush_queue_.push_back(connection);
  if (flush_queue_.size() == 1) {
    uv_prepare_start(flush_prepare_.get(), [](uv_prepare_t* h) {
      if (h->data != nullptr) static_cast<HttpServer*>(h->data)->flushQueued();
    });
  }
}

void HttpServer::flushQueued() {
  // One at a time: a write error destroys its connection, and destroyConnection() takes a
  // queued connection out of the queue.
  while (!flush_queue_.empty()) {
    Connection* c = flush_queue_.back();
    flush_queue_.pop_back();
    c->flush_queued_ = false;
    Guard guard(c);
    c->flush();
  }
  uv_prepare_stop(flush_prepare_.get());
}

void HttpServer::addInFlight(int delta) {
  if (delta > 0) {
    ++in_flight_;
    metrics_.http_in_flight.Increment();
  } else {
    --in_flight_;
    metrics_.http_in_flight.Decrement();
  }
}

void HttpServer::recordResponse(std::string_view route, int status, int64_t received_us) {
  // Family::Add builds a label map and takes a lock; cache the series per (route, code).
  const std::string_view label = route.empty() ? kUnmatchedRoute : route;
  auto it = route_metrics_.find(label);
  if (it == route_metrics_.end()) {
    it = route_metrics_.emplace(label, RouteMetrics{&metrics_.httpLatency(label), {}}).first;
  }
  RouteMetrics& rm = it->second;
  prometheus::Counter* counter = nullptr;
  for (auto& [code, c] : rm.codes) {
    if (code == status) counter = c;
  }
  if (counter == nullptr) {
    counter = &metrics_.httpRequests(label, status);
    rm.codes.emplace_back(status, counter);
  }
  counter->Increment();
  if (received_us > 0) {
    rm.latency->Observe(static_cast<double>(scheduler_.nowUs() - received_us) / 1e6);
  }
}

void HttpServer::stopAccepting() {
  draining_ = true;
  tcp_.close();
  unix_.close();
}

size_t HttpServer::closeIdleConnections() {
  std::vector<Connection*> idle;
  for (auto& [c, owned] : connections_) {
    if (c->idleForClose()) idle.push_back(c);
  }
  for (Connection* c : idle) {
    if (connections_.count(c) == 0) continue;
    Guard guard(c);
    c->closeNow();
  }
  return idle.size();
}

void HttpServer::close(std::function<void()> done) {
  stopAccepting();
  closed_ = true;
  std::vector<Connection*> all;
  all.reserve(connections_.size());
  for (auto& [c, owned] : connections_) all.push_back(c);
  for (Connection* c : all) {
    // A client-gone callback may close other connections (or the server) meanwhile.
    if (connections_.count(c) == 0) continue;
    Guard guard(c);
    c->closeNow();
  }
  flush_prepare_.close();
  if (done) scheduler_.post(std::move(done));
}

}  // namespace sidelock::http
