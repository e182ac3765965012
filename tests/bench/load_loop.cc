#include "bench/load_loop.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sidelock::bench {
namespace {

void throwErrno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void setNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throwErrno("fcntl");
}

/// Where a header line starting with `lower_name` (ASCII, compared case-insensitively) begins in
/// a response head, or npos. Only line starts are compared: the client's parse is as lean as its
/// gRPC peer's, so that the client's CPU is not what the 1-call figures measure.
size_t findHeader(std::string_view head, std::string_view lower_name) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  for (size_t line = head.find("\r\n"); line != std::string_view::npos;
       line = head.find("\r\n", line + 2)) {
    const size_t start = line + 2;
    if (head.size() - start < lower_name.size()) continue;
    size_t k = 0;
    while (k < lower_name.size() && lower(head[start + k]) == lower_name[k]) ++k;
    if (k == lower_name.size()) return start;
  }
  return std::string_view::npos;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// EventLoop

EventLoop::EventLoop() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd_ < 0 || timer_fd_ < 0) throwErrno("epoll/timerfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the timer: every other entry is a Connection
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) < 0) throwErrno("epoll_ctl timer");
}

EventLoop::~EventLoop() {
  close(timer_fd_);
  close(epoll_fd_);
}

void EventLoop::at(Clock::time_point when, std::function<void()> fn) {
  const bool earliest = timers_.empty() || when < timers_.top().when;
  timers_.push(Timer{when, next_seq_++, std::move(fn)});
  if (earliest) armTimerFd(when);
}

void armTimerFdAt(int fd, Clock::time_point when) {
  // steady_clock is CLOCK_MONOTONIC on Linux, so its count is an absolute timerfd time.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
  itimerspec spec{};
  spec.it_value.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
  timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void EventLoop::armTimerFd(Clock::time_point when) { armTimerFdAt(timer_fd_, when); }

int epollWaitMsUntil(Clock::time_point deadline, Clock::time_point now) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  return static_cast<int>(std::max<int64_t>(0, left.count())) + 1;
}

void EventLoop::runDueTimers() {
  uint64_t expirations = 0;
  [[maybe_unused]] ssize_t n = read(timer_fd_, &expirations, sizeof expirations);
  const auto now = Clock::now();
  while (!timers_.empty() && timers_.top().when <= now) {
    auto fn = std::move(const_cast<Timer&>(timers_.top()).fn);
    timers_.pop();
    fn();
  }
  if (!timers_.empty()) armTimerFd(timers_.top().when);
}

bool EventLoop::runUntil(const std::function<bool()>& done, Clock::time_point deadline) {
  epoll_event events[256];
  while (!done()) {
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // The timerfd wakes us for timers; the epoll timeout only bounds the wait by the deadline.
    const int n = epoll_wait(epoll_fd_, events, 256, epollWaitMsUntil(deadline, now));
    if (n < 0 && errno != EINTR) throwErrno("epoll_wait");
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        runDueTimers();
      } else {
        static_cast<Connection*>(events[i].data.ptr)->handleEvents(events[i].events);
      }
    }
  }
  return true;
}

void EventLoop::watch(int fd, Connection* conn) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = conn;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) < 0) throwErrno("epoll_ctl add");
}

void EventLoop::setWriteInterest(int fd, Connection* conn, bool want_write) {
  epoll_event ev{};
  ev.events = EPOLLIN | (want_write ? EPOLLOUT : 0u);
  ev.data.ptr = conn;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::unwatch(int fd) { epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

// ---------------------------------------------------------------------------------------------
// Connection

std::unique_ptr<Connection> Connection::tcp(EventLoop& loop, int port, Protocol protocol) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwErrno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    close(fd);
    throwErrno("connect 127.0.0.1:" + std::to_string(port));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<Connection>(new Connection(loop, fd, protocol));
}

std::unique_ptr<Connection> Connection::unix(EventLoop& loop, const std::string& path,
                                             Protocol protocol) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throwErrno("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
    close(fd);
    throwErrno("connect " + path);
  }
  return std::unique_ptr<Connection>(new Connection(loop, fd, protocol));
}

Connection::Connection(EventLoop& loop, int fd, Protocol protocol)
    : loop_(loop), fd_(fd), protocol_(protocol) {
  setNonBlocking(fd_);
  if (protocol_ == Protocol::kResp) reader_ = redisReaderCreate();
  loop_.watch(fd_, this);
}

Connection::~Connection() {
  if (fd_ >= 0) {
    loop_.unwatch(fd_);
    close(fd_);
  }
  if (reader_ != nullptr) redisReaderFree(reader_);
}

void Connection::send(std::string_view request) {
  ++pending_;
  if (broken()) {
    deliver(Reply{.broken = true});
    return;
  }
  out_.append(request);
  if (!want_write_) flush();
}

void Connection::flush() {
  while (out_sent_ < out_.size()) {
    const ssize_t n = write(fd_, out_.data() + out_sent_, out_.size() - out_sent_);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!want_write_) loop_.setWriteInterest(fd_, this, want_write_ = true);
      return;
    }
    fail();
    return;
  }
  out_.clear();
  out_sent_ = 0;
  if (want_write_) loop_.setWriteInterest(fd_, this, want_write_ = false);
}

void Connection::handleEvents(uint32_t events) {
  if ((events & EPOLLOUT) != 0 && !broken()) flush();
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 && !broken()) readAvailable();
}

void Connection::readAvailable() {
  char buf[64 * 1024];
  bool closed = false;
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n > 0) {
      if (protocol_ == Protocol::kHttp) {
        in_.append(buf, static_cast<size_t>(n));
      } else if (redisReaderFeed(reader_, buf, static_cast<size_t>(n)) != REDIS_OK) {
        fail();
        return;
      }
      if (static_cast<size_t>(n) < sizeof buf) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    closed = true;  // EOF or error: answers read before it still count
    break;
  }
  if (protocol_ == Protocol::kHttp) {
    parseHttp();
  } else {
    parseResp();
  }
  if (closed) fail();  // every request still unanswered is answered as broken
}

void Connection::parseHttp() {
  size_t pos = 0;
  while (!broken()) {
    if (chunked_) {
      pos = parseChunks(pos);
      if (chunked_) break;  // waits for more bytes
      continue;
    }
    const size_t head_end = in_.find("\r\n\r\n", pos);
    if (head_end == std::string::npos) break;
    const std::string_view head(in_.data() + pos, head_end - pos);
    if (findHeader(head, "transfer-encoding: chunked") != std::string_view::npos) {
      chunked_ = true;
      chunked_status_ = head.size() > 12 ? std::atoi(head.data() + 9) : 0;
      partial_line_.clear();
      pos = head_end + 4;
      continue;
    }
    size_t body_len = 0;
    const size_t cl = findHeader(head, "content-length:");
    if (cl != std::string_view::npos) {
      body_len = std::strtoul(head.data() + cl + 15, nullptr, 10);
    }
    const size_t body_start = head_end + 4;
    if (in_.size() < body_start + body_len) break;
    Reply reply;
    // "HTTP/1.1 200 OK": the status code starts at offset 9.
    reply.http_status = head.size() > 12 ? std::atoi(head.data() + 9) : 0;
    reply.body = std::string_view(in_.data() + body_start, body_len);
    pos = body_start + body_len;
    deliver(reply);
  }
  in_.erase(0, pos);
}

size_t Connection::parseChunks(size_t pos) {
  while (!broken()) {
    // "<hex size>\r\n<data>\r\n"; size 0 (then "\r\n": no trailers) ends the answer.
    const size_t size_end = in_.find("\r\n", pos);
    if (size_end == std::string::npos) return pos;
    const size_t size = std::strtoul(in_.c_str() + pos, nullptr, 16);
    const size_t data = size_end + 2;
    if (in_.size() < data + size + 2) return pos;
    pos = data + size + 2;
    if (size == 0) {
      chunked_ = false;
      deliver(Reply{.http_status = chunked_status_});
      return pos;
    }
    std::string_view rest(in_.data() + data, size);
    for (size_t nl = rest.find('\n'); nl != std::string_view::npos; nl = rest.find('\n')) {
      Reply line{.http_status = chunked_status_, .line = true};
      if (!partial_line_.empty()) partial_line_.append(rest.substr(0, nl));
      line.body = partial_line_.empty() ? rest.substr(0, nl) : std::string_view(partial_line_);
      if (handler_) handler_(line);
      partial_line_.clear();
      rest.remove_prefix(nl + 1);
      if (broken()) return pos;
    }
    partial_line_.append(rest);
  }
  return pos;
}

void Connection::parseResp() {
  while (!broken()) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      fail();
      return;
    }
    if (raw == nullptr) return;
    const auto* r = static_cast<redisReply*>(raw);
    Reply reply;
    switch (r->type) {
      case REDIS_REPLY_INTEGER:
        reply.integer = r->integer;
        break;
      case REDIS_REPLY_ARRAY:
        reply.integer = r->elements > 0 && r->element[0]->type == REDIS_REPLY_INTEGER
                            ? r->element[0]->integer
                            : -1;
        break;
      case REDIS_REPLY_ERROR:
        reply.redis_error = true;
        reply.redis_text = std::string_view(r->str, r->len);
        break;
      case REDIS_REPLY_STATUS:
      case REDIS_REPLY_STRING:
        reply.redis_text = std::string_view(r->str, r->len);
        break;
      default:
        break;
    }
    deliver(reply);
    freeReplyObject(raw);
  }
}

void Connection::deliver(const Reply& reply) {
  --pending_;
  if (handler_) handler_(reply);
}

void Connection::fail() {
  if (broken()) return;
  loop_.unwatch(fd_);
  close(fd_);
  fd_ = -1;
  out_.clear();
  out_sent_ = 0;
  while (pending_ > 0) deliver(Reply{.broken = true});
}

// ---------------------------------------------------------------------------------------------
// Request builders

std::string httpPost(std::string_view path, std::string_view json_body) {
  std::string r;
  r.reserve(path.size() + json_body.size() + 128);
  r.append("POST ").append(path).append(" HTTP/1.1\r\nHost: localhost\r\n");
  r.append("Content-Type: application/json\r\nContent-Length: ");
  r.append(std::to_string(json_body.size())).append("\r\n\r\n").append(json_body);
  return r;
}

std::string httpGet(std::string_view path) {
  std::string r("GET ");
  r.append(path).append(" HTTP/1.1\r\nHost: localhost\r\n\r\n");
  return r;
}

std::string respCommand(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* formatted = nullptr;
  const int n =
      redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), argv.data(), lens.data());
  if (n < 0) throw std::runtime_error("redisFormatCommandArgv failed");
  std::string out(formatted, static_cast<size_t>(n));
  redisFreeCommand(formatted);
  return out;
}

}  // namespace sidelock::bench
