#include "grpc_load.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace sidelock::bench {

struct GrpcCallbacks {
  static GrpcConnection& self(void* user) { return *static_cast<GrpcConnection*>(user); }

  static ssize_t readBody(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length,
                                uint32_t* flags, nghttp2_data_source*, void* user) {
    auto it = self(user).streams_.find(stream_id);
    if (it == self(user).streams_.end()) return NGHTTP2_ERR_CALLBACK_FAILURE;
    GrpcConnection::Stream& s = it->second;
    const size_t n = std::min(length, s.request.size() - s.request_sent);
    std::memcpy(buf, s.request.data() + s.request_sent, n);
    s.request_sent += n;
    if (s.request_sent == s.request.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto it = self(user).streams_.find(frame->hd.stream_id);
    if (it == self(user).streams_.end()) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    if (n == "grpc-status") it->second.grpc_status = std::atoi(std::string(v).c_str());
    if (n == "grpc-message") it->second.grpc_text = std::string(v);
    return 0;
  }

  static int onData(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                    void* user) {
    auto it = self(user).streams_.find(stream_id);
    if (it != self(user).streams_.end()) {
      it->second.response.append(reinterpret_cast<const char*>(data), len);
    }
    return 0;
  }

  static int onClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user) {
    GrpcConnection& c = self(user);
    auto it = c.streams_.find(stream_id);
    if (it == c.streams_.end()) return 0;
    GrpcConnection::Stream s = std::move(it->second);
    c.streams_.erase(it);
    GrpcReply r;
    r.grpc_status = s.grpc_status;
    r.grpc_text = s.grpc_text;
    r.broken = s.grpc_status < 0;
    // One message: 1 byte compressed flag, 4 bytes big-endian length, the message.
    if (s.response.size() >= 5) r.message = std::string_view(s.response).substr(5);
    s.done(r);
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
  nghttp2_session_client_new(&session_, cb, this);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
}

GrpcConnection::~GrpcConnection() {
  nghttp2_session_del(session_);
  if (fd_ >= 0) ::close(fd_);
}

void GrpcConnection::call(std::string_view path, std::string_view message, Handler done) {
  if (broken()) {
    GrpcReply r;
    r.broken = true;
    done(r);
    return;
  }
  auto nv = [](std::string_view n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                      NGHTTP2_NV_FLAG_NONE};
  };
  const nghttp2_nv headers[] = {nv(":method", "POST"),        nv(":scheme", "http"),
                                nv(":path", path),            nv(":authority", authority_),
                                nv("content-type", "application/grpc"), nv("te", "trailers")};
  std::string framed(5, '\0');
  const auto len = static_cast<uint32_t>(message.size());
  framed[1] = static_cast<char>(len >> 24);
  framed[2] = static_cast<char>(len >> 16);
  framed[3] = static_cast<char>(len >> 8);
  framed[4] = static_cast<char>(len);
  framed.append(message);
  nghttp2_data_provider body{};
  body.read_callback = &GrpcCallbacks::readBody;
  // The stream id is known only after submitting; the body is read at send time, by then stored.
  const int32_t id = nghttp2_submit_request(session_, nullptr, headers,
                                             sizeof headers / sizeof headers[0], &body, nullptr);
  if (id < 0) {
    GrpcReply r;
    r.broken = true;
    done(r);
    return;
  }
  streams_[id] = Stream{std::move(framed), 0, {}, -1, {}, std::move(done)};
}

bool GrpcConnection::wantsWrite() const {
  return fd_ >= 0 && (!out_.empty() || nghttp2_session_want_write(session_));
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
    if (out_.empty()) return;
    const ssize_t w = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      return fail();
    }
    out_.erase(0, static_cast<size_t>(w));
    if (!out_.empty()) return;
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
    if (nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buf),
                                  static_cast<size_t>(n)) < 0) {
      return fail();
    }
    // A short read took everything there was: no further recv() to hear EAGAIN (load_loop.cc's
    // HTTP/1.1 and Redis clients stop here too; that extra syscall was this client's alone).
    if (static_cast<size_t>(n) < sizeof buf) return;
  }
}

void GrpcConnection::fail() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, s] : streams) {
    GrpcReply r;
    r.broken = true;
    s.done(r);
  }
}

bool GrpcLoop::runUntil(const std::function<bool()>& done, const std::function<void()>& tick,
                        Clock::time_point deadline) {
  std::vector<pollfd> fds;
  while (true) {
    tick();
    for (GrpcConnection* c : conns_) c->flush();
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    fds.clear();
    for (GrpcConnection* c : conns_) {
      if (c->fd_ < 0) continue;
      fds.push_back(pollfd{c->fd_, static_cast<short>(POLLIN | (c->wantsWrite() ? POLLOUT : 0)),
                           0});
    }
    if (::poll(fds.data(), fds.size(), 1) < 0 && errno != EINTR) return false;
    size_t k = 0;
    for (GrpcConnection* c : conns_) {
      if (c->fd_ < 0) continue;
      const short ev = fds[k++].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) c->readAvailable();
    }
  }
}

}  // namespace sidelock::bench
