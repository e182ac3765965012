#include "support/http_client.h"

#include <arpa/inet.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <deque>
#include <stdexcept>

namespace sidelock::testing {

// Response parser: llhttp in response mode, collecting complete messages into a queue. In stream
// mode the body bytes go to a separate buffer as they arrive (chunked streams never "complete").
struct HttpClient::Parser {
  llhttp_t parser;
  llhttp_settings_t settings;
  HttpResponse current;
  std::string header_field;
  std::string header_value;
  bool in_value = false;
  bool headers_done = false;
  bool stream_mode = false;
  std::string* stream_out = nullptr;
  std::deque<HttpResponse> complete;
  bool failed = false;

  Parser() {
    llhttp_settings_init(&settings);
    settings.on_header_field = [](llhttp_t* p, const char* at, size_t len) {
      auto* self = static_cast<Parser*>(p->data);
      if (self->in_value) self->flushHeader();
      self->header_field.append(at, len);
      return 0;
    };
    settings.on_header_value = [](llhttp_t* p, const char* at, size_t len) {
      auto* self = static_cast<Parser*>(p->data);
      self->in_value = true;
      self->header_value.append(at, len);
      return 0;
    };
    settings.on_headers_complete = [](llhttp_t* p) {
      auto* self = static_cast<Parser*>(p->data);
      if (self->in_value) self->flushHeader();
      self->current.status = p->status_code;
      self->current.keep_alive = llhttp_should_keep_alive(p) != 0;
      self->headers_done = true;
      return 0;
    };
    settings.on_body = [](llhttp_t* p, const char* at, size_t len) {
      auto* self = static_cast<Parser*>(p->data);
      if (self->stream_mode && self->stream_out != nullptr)
        self->stream_out->append(at, len);
      else
        self->current.body.append(at, len);
      return 0;
    };
    settings.on_message_complete = [](llhttp_t* p) {
      auto* self = static_cast<Parser*>(p->data);
      self->current.keep_alive = llhttp_should_keep_alive(p) != 0;
      self->complete.push_back(std::move(self->current));
      self->current = HttpResponse{};
      self->headers_done = false;
      // A stream ends with its message: later responses on the connection are ordinary ones.
      self->stream_mode = false;
      self->stream_out = nullptr;
      return 0;
    };
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    parser.data = this;
  }

  void flushHeader() {
    std::string name = header_field;
    for (auto& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    current.headers[name] = header_value;
    header_field.clear();
    header_value.clear();
    in_value = false;
  }

  void feed(const char* data, size_t len) {
    if (failed) return;
    llhttp_errno_t err = llhttp_execute(&parser, data, len);
    if (err == HPE_PAUSED_UPGRADE)
      llhttp_resume_after_upgrade(&parser);
    else if (err != HPE_OK)
      failed = true;
  }
  void finish() {
    if (!failed) llhttp_finish(&parser);
  }
};

namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void writeAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("send failed: ") + strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

HttpClient::HttpClient(int fd) : fd_(fd), parser_(new Parser()) {}

HttpClient::HttpClient(HttpClient&& o) noexcept
    : fd_(o.fd_),
      stream_buf_(std::move(o.stream_buf_)),
      parser_(o.parser_) {
  o.fd_ = -1;
  o.parser_ = nullptr;
  if (parser_ != nullptr) {
    parser_->parser.data = parser_;
    if (parser_->stream_out != nullptr) parser_->stream_out = &stream_buf_;  // it pointed into o
  }
}

HttpClient& HttpClient::operator=(HttpClient&& o) noexcept {
  if (this != &o) {
    close();
    delete parser_;
    fd_ = o.fd_;
    parser_ = o.parser_;
    stream_buf_ = std::move(o.stream_buf_);
    o.fd_ = -1;
    o.parser_ = nullptr;
    if (parser_ != nullptr) {
      parser_->parser.data = parser_;
      if (parser_->stream_out != nullptr) parser_->stream_out = &stream_buf_;
    }
  }
  return *this;
}

HttpClient::~HttpClient() {
  close();
  delete parser_;
}

HttpClient HttpClient::tcp(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("connect to port " + std::to_string(port) +
                             " failed: " + strerror(errno));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return HttpClient(fd);
}

HttpClient HttpClient::unix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    throw std::runtime_error("connect to " + path + " failed: " + strerror(errno));
  }
  return HttpClient(fd);
}

void HttpClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void HttpClient::sendRaw(const std::string& bytes) { writeAll(fd_, bytes); }

void HttpClient::sendRequest(const std::string& method, const std::string& path,
                             const std::string& body) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  writeAll(fd_, req);
}

HttpResponse HttpClient::request(const std::string& method, const std::string& path,
                                 const std::string& body, int timeout_ms) {
  sendRequest(method, path, body);
  auto r = readResponse(timeout_ms);
  if (!r) throw std::runtime_error("no response to " + method + " " + path);
  return *r;
}

HttpClient::ReadResult HttpClient::readSome(int64_t deadline_ms) {
  while (true) {
    if (fd_ < 0 || parser_->failed) return ReadResult::kClosed;
    int64_t left = deadline_ms - nowMs();
    if (left <= 0) return ReadResult::kTimeout;
    pollfd p{fd_, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return ReadResult::kTimeout;
    if (rc < 0) return ReadResult::kClosed;
    char buf[16384];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      parser_->finish();  // a response delimited by the close completes now
      return ReadResult::kClosed;
    }
    parser_->feed(buf, static_cast<size_t>(n));
    return ReadResult::kData;
  }
}

std::optional<HttpResponse> HttpClient::readResponse(int timeout_ms) {
  const int64_t deadline = nowMs() + timeout_ms;
  while (parser_->complete.empty()) {
    if (readSome(deadline) != ReadResult::kData) break;
  }
  if (parser_->complete.empty()) return std::nullopt;
  HttpResponse r = std::move(parser_->complete.front());
  parser_->complete.pop_front();
  return r;
}

std::optional<HttpResponse> HttpClient::readStreamHead(int timeout_ms) {
  parser_->stream_mode = true;
  parser_->stream_out = &stream_buf_;
  const int64_t deadline = nowMs() + timeout_ms;
  while (!parser_->headers_done && parser_->complete.empty()) {
    if (readSome(deadline) != ReadResult::kData && parser_->complete.empty()) return std::nullopt;
  }
  if (!parser_->complete.empty()) {
    // Not a stream after all (an error answer): hand it over whole, body included.
    HttpResponse r = std::move(parser_->complete.front());
    parser_->complete.pop_front();
    if (r.body.empty()) r.body = stream_buf_;
    stream_buf_.clear();
    parser_->stream_mode = false;
    return r;
  }
  HttpResponse head = parser_->current;
  return head;
}

std::optional<std::string> HttpClient::readStreamLine(int timeout_ms) {
  const int64_t deadline = nowMs() + timeout_ms;
  while (true) {
    auto nl = stream_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = stream_buf_.substr(0, nl);
      stream_buf_.erase(0, nl + 1);
      return line;
    }
    if (!parser_->complete.empty()) return std::nullopt;  // the stream ended
    if (readSome(deadline) != ReadResult::kData) return std::nullopt;
  }
}

bool HttpClient::waitForClose(int timeout_ms) {
  const int64_t deadline = nowMs() + timeout_ms;
  if (fd_ < 0) return true;
  while (true) {
    // A parse error is no close: keep reading (and discarding) until EOF.
    parser_->failed = false;
    switch (readSome(deadline)) {
      case ReadResult::kData:
        continue;
      case ReadResult::kTimeout:
        return false;
      case ReadResult::kClosed:
        return true;
    }
  }
}

}  // namespace sidelock::testing
