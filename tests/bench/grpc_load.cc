#include "grpc_load.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "load_loop.h"

namespace sidelock::bench {

std::string grpcFrame(std::string_view message) {
  std::string framed(5, '\0');
  const auto len = static_cast<uint32_t>(message.size());
  framed[1] = static_cast<char>(len >> 24);
  framed[2] = static_cast<char>(len >> 16);
  framed[3] = static_cast<char>(len >> 8);
  framed[4] = static_cast<char>(len);
  framed.append(message);
  return framed;
}

struct GrpcCallbacks {
  using Stream = GrpcConnection::Stream;
  static GrpcConnection& self(void* user) { return *static_cast<GrpcConnection*>(user); }
  static Stream* stream(nghttp2_session* session, int32_t stream_id) {
    return static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, stream_id));
  }

  static ssize_t readBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                          nghttp2_data_source* source, void*) {
    Stream& s = *static_cast<Stream*>(source->ptr);
    const size_t n = std::min(length, s.request.size() - s.request_sent);
    std::memcpy(buf, s.request.data() + s.request_sent, n);
    s.request_sent += n;
    if (s.request_sent == s.request.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  static int onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
    Stream* s = stream(session, frame->hd.stream_id);
    if (s == nullptr) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const char* v = reinterpret_cast<const char*>(value);
    if (n == "grpc-status") {
      int status = -1;
      const auto [end, ec] = std::from_chars(v, v + valuelen, status);
      s->grpc_status = ec == std::errc() && end == v + valuelen ? status : -1;
    } else if (n == "grpc-message" && s->grpc_status != 0) {
      // Only a failed call's text is read (the trailers may name it before grpc-status).
      s->grpc_text.assign(v, valuelen);
      s->has_text = true;
    }
    return 0;
  }

  static int onData(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                    size_t len, void* user) {
    Stream* s = stream(session, stream_id);
    if (s == nullptr || !s->active) return 0;
    const std::string_view chunk(reinterpret_cast<const char*>(data), len);
    if (s->response.empty() && !s->borrowed) {
      // nghttp2 keeps `data` until the next mem_recv (nghttp2.h: it may point into our input
      // bytes, which readAvailable keeps that long): the usual one-chunk answer is not copied.
      s->response = chunk;
      s->borrowed = true;
      self(user).borrowing_.push_back(s);
      return 0;
    }
    if (s->borrowed) {
      s->response_copy.assign(s->response);
      s->borrowed = false;
    }
    s->response_copy.append(chunk);
    s->response = s->response_copy;
    return 0;
  }

  static int onClose(nghttp2_session* session, int32_t stream_id, uint32_t, void* user) {
    Stream* s = stream(session, stream_id);
    if (s == nullptr || !s->active) return 0;
    GrpcReply r;
    r.grpc_status = s->grpc_status;
    r.broken = s->grpc_status < 0;
    if (s->grpc_status != 0 && s->has_text) r.grpc_text = s->grpc_text;
    // One message: 1 byte compressed flag, 4 bytes big-endian length, the message.
    if (s->response.size() >= 5) r.message = s->response.substr(5);
    self(user).finish(*s, r);
    return 0;
  }
};

std::unique_ptr<GrpcConnection> GrpcConnection::tcp(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("gRPC connect to port " + std::to_string(port) + ": " +
                             std::strerror(err));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<GrpcConnection>(new GrpcConnection(fd, port));
}

GrpcConnection::GrpcConnection(int fd, int port)
    : fd_(fd), authority_("127.0.0.1:" + std::to_string(port)) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, &GrpcCallbacks::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &GrpcCallbacks::onData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &GrpcCallbacks::onClose);
  // As lean as the HTTP/1.1 client, which trusts the sidecar's framing: nghttp2 checks no header
  // field of the answers (a bench client, not a product one) and keeps no closed streams.
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_http_messaging(option, 1);
  nghttp2_option_set_no_closed_streams(option, 1);
  nghttp2_session_client_new3(&session_, cb, this, option, memory_.mem());
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
}

GrpcConnection::~GrpcConnection() {
  nghttp2_session_del(session_);
  if (fd_ >= 0) ::close(fd_);
}

GrpcConnection::Stream* GrpcConnection::takeStream() {
  Stream* s = nullptr;
  if (free_.empty()) {
    // Grows to the most calls in flight at once (+1: a record is freed after its handler, which
    // may start the next call); from then on every call reuses one.
    streams_.push_back(std::make_unique<Stream>());
    s = streams_.back().get();
  } else {
    s = free_.back();
    free_.pop_back();
  }
  s->active = true;
  s->request_sent = 0;
  s->response = {};
  s->borrowed = false;
  s->grpc_status = -1;
  s->has_text = false;
  return s;
}

void GrpcConnection::finish(Stream& s, const GrpcReply& r) {
  s.active = false;
  --pending_;
  (*s.done)(r);
  // Only now: `r` may view the record's bytes.
  s.borrowed = false;
  free_.push_back(&s);
}

void GrpcConnection::call(std::string_view path, std::string_view framed, const Handler* done) {
  if (broken()) {
    GrpcReply r;
    r.broken = true;
    (*done)(r);
    return;
  }
  // Not copied by nghttp2 (NO_COPY): literals, authority_ and the caller's path, all of which
  // outlive the HEADERS frame.
  auto nv = [](std::string_view n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                      NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
  };
  const nghttp2_nv headers[] = {nv(":method", "POST"),        nv(":scheme", "http"),
                                nv(":path", path),            nv(":authority", authority_),
                                nv("content-type", "application/grpc"), nv("te", "trailers")};
  Stream* s = takeStream();
  s->request = framed;
  s->done = done;
  nghttp2_data_provider body{};
  body.source.ptr = s;
  body.read_callback = &GrpcCallbacks::readBody;
  const int32_t id = nghttp2_submit_request(session_, nullptr, headers,
                                            sizeof headers / sizeof headers[0], &body, s);
  ++pending_;
  if (id < 0) finish(*s, GrpcReply{.broken = true});
}

void GrpcConnection::flush() {
  // Everything nghttp2 has queued (a call's HEADERS and DATA frames, the calls started this turn)
  // leaves in one send(), as gRPC clients batch their writes: mem_send returns one frame at a
  // time, and a send() per frame would cost this client a syscall per frame (and the sidecar,
  // now and then, a read of a lone HEADERS frame).
  constexpr size_t kBatchBytes = 64 * 1024;
  while (fd_ >= 0) {
    while (out_.size() < kBatchBytes) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return fail();
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out_.empty()) break;
    const ssize_t w = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return fail();
    }
    out_.erase(0, static_cast<size_t>(w));
    if (!out_.empty()) break;
  }
  // EPOLLOUT only while the socket holds bytes back: the loop flushes every turn anyway, the
  // interest just wakes it when the socket takes more.
  if (fd_ >= 0 && wantsWrite() != watching_write_) {
    watching_write_ = !watching_write_;
    epoll_event ev{};
    ev.events = EPOLLIN | (watching_write_ ? EPOLLOUT : 0u);
    ev.data.ptr = this;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_, &ev);
  }
}

void GrpcConnection::readAvailable() {
  char buf[65536];
  while (fd_ >= 0) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return fail();
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return fail();
    }
    const ssize_t used = nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buf),
                                                  static_cast<size_t>(n));
    keepBorrowed();  // before `buf` is read into again
    if (used < 0) return fail();
    // A short read took everything there was: no further recv() to hear EAGAIN (load_loop.cc's
    // HTTP/1.1 and Redis clients stop here too; that extra syscall was this client's alone).
    if (static_cast<size_t>(n) < sizeof buf) return;
  }
}

void GrpcConnection::keepBorrowed() {
  for (Stream* s : borrowing_) {
    if (!s->active || !s->borrowed) continue;  // ended in this read (or already copied)
    s->response_copy.assign(s->response);
    s->response = s->response_copy;
    s->borrowed = false;
  }
  borrowing_.clear();
}

void GrpcConnection::fail() {
  if (fd_ < 0) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  ::close(fd_);
  fd_ = -1;
  borrowing_.clear();
  // Handlers see broken() and answer a new call at once, so the records stay as they are.
  for (const auto& s : streams_) {
    if (s->active) finish(*s, GrpcReply{.broken = true});
  }
}

GrpcLoop::GrpcLoop()
    : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      timer_fd_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the timer: every other entry is a GrpcConnection
  if (epoll_fd_ < 0 || timer_fd_ < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev) < 0) {
    const int err = errno;
    if (timer_fd_ >= 0) ::close(timer_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    throw std::runtime_error("epoll/timerfd: " + std::string(std::strerror(err)));
  }
}

GrpcLoop::~GrpcLoop() {
  ::close(timer_fd_);
  ::close(epoll_fd_);
}

void GrpcLoop::wakeAt(Clock::time_point when) { armTimerFdAt(timer_fd_, when); }

void GrpcLoop::add(GrpcConnection* c) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = c;
  if (c->fd_ >= 0 && ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd_, &ev) < 0) {
    throw std::runtime_error("epoll_ctl: " + std::string(std::strerror(errno)));
  }
  c->epoll_fd_ = epoll_fd_;
  conns_.push_back(c);
}

bool GrpcLoop::runUntil(const std::function<bool()>& done, const std::function<void()>& tick,
                        Clock::time_point deadline) {
  epoll_event events[64];
  while (true) {
    tick();
    for (GrpcConnection* c : conns_) c->flush();
    if (done()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    // Until the deadline: wakeAt's timerfd ends the wait for the caller's timed steps, as
    // EventLoop's does. (A 1 ms poll here armed a kernel timer on every wait, which on this VM
    // cost the gRPC client ~30 us of CPU per call more than the HTTP/1.1 client's loop: a
    // measuring-tool cost, not the sidecar's.)
    const int n = ::epoll_wait(epoll_fd_, events, 64, epollWaitMsUntil(deadline, now));
    if (n < 0 && errno != EINTR) return false;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {  // wakeAt's timer: the next tick does the work
        uint64_t expirations = 0;
        [[maybe_unused]] const ssize_t r = ::read(timer_fd_, &expirations, sizeof expirations);
        continue;
      }
      // EPOLLOUT needs nothing here: the next turn flushes.
      if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
        static_cast<GrpcConnection*>(events[i].data.ptr)->readAvailable();
      }
    }
  }
}

}  // namespace sidelock::bench
