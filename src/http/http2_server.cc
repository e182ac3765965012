#include "http/http2_server.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "common/invariant.h"
#include "common/log.h"
#include "http/connection.h"  // identifyPeer
#include "http/http2_memory.h"

namespace sidelock::http {
namespace {

constexpr int kListenBacklog = 511;
constexpr size_t kReadBufferSize = 64 * 1024;
// Output produced by nghttp2 but not yet taken by the kernel, past which nothing more is
// produced (frames stay queued inside nghttp2, bounded by its flow control and our stream limit):
// a peer that never reads cannot make the connection's memory grow, and the write timeout closes it.
constexpr size_t kMaxBufferedOutput = 256 * 1024;
// Queued SETTINGS / PING ACKs (and RST_STREAMs) a peer that does not read may cause: past this
// nghttp2 drops the connection (the SETTINGS and PING floods).
constexpr size_t kMaxOutboundAck = 1000;
// Entries in one SETTINGS frame.
constexpr size_t kMaxSettingsEntries = 32;
// CONTINUATION frames after one HEADERS (the CONTINUATION flood); nghttp2's default is 8.
constexpr size_t kMaxContinuations = 8;
// A write this small on a stream's empty queue is taken whatever the connection's and the
// server's queued bytes (Http2Connection::mayQueue): at most one per open stream.
constexpr size_t kAlwaysQueuedBytes = 64 * 1024;

// RAII for nghttp2's objects (src/README.md, rule 14: the library is used through its API, and
// every object it allocates is freed on every path).
struct SessionDeleter {
  void operator()(nghttp2_session* s) const { nghttp2_session_del(s); }
};
struct CallbacksDeleter {
  void operator()(nghttp2_session_callbacks* c) const { nghttp2_session_callbacks_del(c); }
};
struct OptionDeleter {
  void operator()(nghttp2_option* o) const { nghttp2_option_del(o); }
};
using SessionPtr = std::unique_ptr<nghttp2_session, SessionDeleter>;

/// nghttp2's view of header fields: on the stack for the few fields of a usual answer, so that a
/// response costs no allocation for it. nghttp2 copies a field's name and value when it is
/// submitted, except those of a literal() field (static storage: nothing to copy).
class NvList {
 public:
  explicit NvList(std::span<const Http2Field> fields) {
    if (fields.size() > inline_.size()) heap_.resize(fields.size());
    nghttp2_nv* out = fields.size() > inline_.size() ? heap_.data() : inline_.data();
    for (const Http2Field& field : fields) {
      *out++ = nghttp2_nv{
          const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(field.name.data())),
          const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(field.value.data())),
          field.name.size(), field.value.size(),
          field.is_static ? uint8_t{NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}
                          : uint8_t{NGHTTP2_NV_FLAG_NONE}};
    }
    size_ = fields.size();
  }
  const nghttp2_nv* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
  size_t size() const { return size_; }

 private:
  // Not zeroed (a response's NvList is built twice per call): only the first size_ are read,
  // and the constructor writes them.
  std::array<nghttp2_nv, 8> inline_;
  std::vector<nghttp2_nv> heap_;
  size_t size_ = 0;
};

}  // namespace

// --- Http2Connection ---------------------------------------------------------------------------

/// One client connection and its nghttp2 server session.
class Http2Connection {
 public:
  explicit Http2Connection(Http2Server* server) : server_(server) {}
  ~Http2Connection() {
    if (write_ != nullptr) write_->owner = nullptr;
    if (flush_queued_) server_->unqueueFlush(this);
    countOut();
  }
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  event::ClientStream& stream() { return stream_; }

  /// Counts the connection in its listener's budget (countOut() when it closes).
  void countIn(Http2Server::ListenerBudget* budget, std::string peer_key);
  Status start(std::shared_ptr<const PeerIdentity> peer);
  /// Since when no stream has been open (0 while one is): the eviction order.
  int64_t idleSinceUs() const { return streams_.empty() ? idle_since_us_ : 0; }
  /// Streams open on this connection (attached: a request's, until it is done or reset).
  size_t openStreams() const { return streams_.size(); }
  const Http2Server::ListenerBudget* budget() const { return budget_; }
  const std::string& peerKey() const { return peer_key_; }
  /// GOAWAY: no new streams; the connection closes once the open ones are done.
  void goAway();
  /// Closes the socket now; open streams see onClose(false). Destroyed on a later loop turn.
  void closeNow();
  /// Makes room for a newcomer (the connection has no stream open): out of its listener's count
  /// at once, then GOAWAY NO_ERROR and the close (a gRPC client retries a call that crossed it).
  void evict() {
    countOut();
    failSession(NGHTTP2_NO_ERROR);
  }
  /// Asks for output: flushNow() runs before the loop next waits (Http2Server::queueFlush), so
  /// the frames every stream submitted this turn leave in one write.
  void sendPending();
  /// Produces output and writes it, unless inside nghttp2 (the outer call does it after).
  void flushNow();
  bool flush_queued_ = false;  // in Http2Server::flush_queue_

  // For Http2Stream.
  nghttp2_session* session() const { return session_.get(); }
  /// Whether a stream holding `stream_queued` bytes may queue `incoming` more. A small write on
  /// an empty queue is always taken (a unary answer is not refused because others filled the
  /// budgets); beyond, the stream's limit, and the connection's and the server's over all
  /// streams (one larger write on an empty queue passes the stream's limit, not those).
  bool mayQueue(size_t stream_queued, size_t incoming) const {
    const Http2Options& o = server_->options_;
    if (stream_queued == 0 && incoming <= kAlwaysQueuedBytes) return true;
    return stream_queued <= o.max_queued_bytes_per_stream &&
           queued_bytes_ <= o.max_queued_bytes_per_connection &&
           server_->queued_bytes_ <= o.max_queued_bytes;
  }
  void addQueued(size_t bytes) {
    queued_bytes_ += bytes;
    server_->queued_bytes_ += bytes;
  }
  /// `bytes` of a stream's queue leave the budgets (taken by nghttp2, or closed with it).
  void releaseQueued(size_t bytes) {
    queued_bytes_ -= bytes;
    server_->queued_bytes_ -= bytes;
  }
  /// nghttp2 took `bytes` of a stream's queue: output moves, the write timeout's stall ends.
  void tookQueued(size_t bytes) {
    releaseQueued(bytes);
    stalled_since_us_ = 0;
  }
  void postReset(int32_t stream_id) {
    server_->scheduler_.post(alive_.guarded([this, stream_id] {
      if (closed_ || session_dead_) return;
      nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
      sendPending();
    }));
  }

 private:
  struct WriteReq {
    uv_write_t req{};
    std::string data;
    Http2Connection* owner = nullptr;
  };

  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int onDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user);
  /// Notes a DATA frame that ends its stream (its chunks come next; onDataChunk's flags are
  /// always NONE).
  static int onBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user);
  static int onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code, void* user);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user);

  /// The open stream `id`, or null. Each stream is nghttp2's stream user data while it is in
  /// streams_ (attach() to detach()): no map of our own to look it up in.
  Http2Stream* find(int32_t id) {
    // A stream's frames come in runs (HEADERS, then each of its header fields, its DATA): the
    // stream found last is looked at first.
    if (last_found_ != nullptr && last_found_->id_ == id) return last_found_;
    Http2Stream* s =
        static_cast<Http2Stream*>(nghttp2_session_get_stream_user_data(session_.get(), id));
    if (s != nullptr) last_found_ = s;
    return s;
  }
  /// Keeps `s` (streams_) and makes it the user data of its nghttp2 stream. False if nghttp2 has
  /// no such stream.
  bool attach(Http2StreamPtr s);
  /// Takes `s` out of streams_ (what it returns is the last reference the connection held) and
  /// off its nghttp2 stream, unless nghttp2 is closing that stream (`nghttp2_closing`: it forgets
  /// the user data itself). Every stream that was attached is detached once, on every path: its
  /// close (onStreamClose), the connection's (closeStreams).
  Http2StreamPtr detach(Http2Stream* s, bool nghttp2_closing);
  void onRead(ssize_t nread, const uv_buf_t* buf);
  /// Hands pending_ to the socket: written directly when it takes it all, the rest by startWrite.
  /// False if the connection closed.
  bool writePending();
  /// uv_write of pending_ (what the socket did not take at once), under the write timeout.
  void startWrite();
  void onWritten(int status);
  /// The connection's deadlines, one timer for all: the preface, each request's end
  /// (request_timeout_ms), the idle timeout (no stream open), queued output that does not move
  /// (write_timeout_ms). Armed lazily: a call that opens and closes a stream moves no timer
  /// unless its deadline comes before the one the timer already has.
  void armCheck(int64_t deadline_us);
  void check();
  /// Counts a stream's request body bytes against the connection's and the server's budgets;
  /// false (the stream reset, its bytes let go) if they would go past one.
  bool countRequestBytes(Http2Stream& s, size_t len);
  /// The request of `s` ended (END_STREAM, refused, closed): its bytes leave the budgets.
  void endRequest(Http2Stream& s);
  void countOut();
  void closeStreams();
  /// After a fatal nghttp2 error: GOAWAY `error_code`, then close once it is written.
  void failSession(uint32_t error_code);

  Http2Server* server_;
  Http2Server::ListenerBudget* budget_ = nullptr;  // counted in it while non-null
  std::string peer_key_;
  event::ClientStream stream_;
  SessionPtr session_;
  std::shared_ptr<const PeerIdentity> peer_;
  // The open streams, each at its Http2Stream::slot_ (taken out by swapping the last one in: no
  // allocation per stream once the vector has grown). nghttp2's stream user data points at them.
  std::vector<Http2StreamPtr> streams_;
  Http2Stream* last_found_ = nullptr;  // in streams_ (cleared when it leaves), or null
  std::string pending_;  // produced, not yet handed to the socket
  WriteReq* write_ = nullptr;  // the write in flight
  bool in_session_ = false;    // inside mem_recv / mem_send: no nested mem_send
  bool closed_ = false;
  bool session_dead_ = false;  // a fatal nghttp2 error: the session may not be called again
  int32_t last_stream_id_ = 0;  // the highest stream the client opened
  int64_t started_us_ = 0;      // the preface is due request_timeout_ms after this
  bool preface_received_ = false;  // the client's first SETTINGS arrived
  int64_t idle_since_us_ = 0;      // the last stream closed (or the connection started) then
  size_t request_bytes_ = 0;       // request body bytes of this connection's open requests
  size_t queued_bytes_ = 0;        // response bytes queued in its streams, not taken by nghttp2
  int64_t stalled_since_us_ = 0;   // output queued and not moving since then; 0 = moving
  int64_t check_due_us_ = 0;       // when check_timer_ fires; 0 = not armed
  int32_t ending_data_stream_ = 0;  // the DATA frame being read ends this stream (0: none)
  event::ScopedTimer check_timer_;
  event::ScopedTimer write_timer_;
  event::LivenessToken alive_;
};

Status Http2Connection::start(std::shared_ptr<const PeerIdentity> peer) {
  peer_ = std::move(peer);
  const Http2Options& o = server_->options_;
  nghttp2_session_callbacks* raw_callbacks = nullptr;
  if (nghttp2_session_callbacks_new(&raw_callbacks) != 0) return internalError("nghttp2: out of memory");
  std::unique_ptr<nghttp2_session_callbacks, CallbacksDeleter> callbacks(raw_callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks.get(), onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks.get(), onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks.get(), onFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks.get(), onDataChunk);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks.get(), onBeginFrame);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks.get(), onStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks.get(), onFrameSend);
  nghttp2_option* raw_option = nullptr;
  if (nghttp2_option_new(&raw_option) != 0) return internalError("nghttp2: out of memory");
  std::unique_ptr<nghttp2_option, OptionDeleter> option(raw_option);
  nghttp2_option_set_max_outbound_ack(option.get(), kMaxOutboundAck);
  nghttp2_option_set_max_settings(option.get(), kMaxSettingsEntries);
  nghttp2_option_set_max_continuations(option.get(), kMaxContinuations);
  nghttp2_option_set_stream_reset_rate_limit(option.get(), o.reset_burst, o.reset_rate);
  // Streams the client opens past our SETTINGS_MAX_CONCURRENT_STREAMS are refused by nghttp2
  // (REFUSED_STREAM) before the SETTINGS ACK too.
  nghttp2_option_set_peer_max_concurrent_streams(option.get(), 100);
  // A closed stream is freed at once instead of being kept (up to the stream limit) for RFC 7540's
  // priority tree, which gRPC clients do not use (and RFC 9113 deprecated): nothing changes on
  // the wire, and no call pays for the bookkeeping of the streams closed before it.
  nghttp2_option_set_no_closed_streams(option.get(), 1);
  nghttp2_session* raw_session = nullptr;
  if (nghttp2_session_server_new3(&raw_session, callbacks.get(), this, option.get(),
                                  server_->memory_->mem()) != 0) {
    return internalError("nghttp2: cannot create a session");
  }
  session_.reset(raw_session);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, static_cast<uint32_t>(o.max_concurrent_streams)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(o.max_header_list_bytes)},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(o.initial_window_bytes)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      // RFC 7540's priority tree is not kept (RFC 9218 2.1): nghttp2 then skips its bookkeeping
      // for every stream opened and ignores PRIORITY frames, which gRPC clients do not send
      // (and whose idle streams are one more thing a hostile peer could make it hold).
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  if (nghttp2_submit_settings(session_.get(), NGHTTP2_FLAG_NONE, settings,
                              sizeof(settings) / sizeof(settings[0])) != 0 ||
      nghttp2_session_set_local_window_size(session_.get(), NGHTTP2_FLAG_NONE, 0,
                                            o.initial_window_bytes) != 0) {
    return internalError("nghttp2: cannot submit SETTINGS");
  }
  int rc = uv_read_start(
      stream_.get(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* c = static_cast<Http2Connection*>(h->data);
        *buf = uv_buf_init(c->server_->read_buffer_.data(),
                           static_cast<unsigned>(c->server_->read_buffer_.size()));
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
        if (s->data != nullptr) static_cast<Http2Connection*>(s->data)->onRead(nread, buf);
      });
  if (rc != 0) return unavailable(std::string("uv_read_start: ") + uv_strerror(rc));
  started_us_ = idle_since_us_ = server_->scheduler_.nowUs();
  check();  // arms the preface's and the idle deadlines
  sendPending();
  return Status::ok();
}

void Http2Connection::countIn(Http2Server::ListenerBudget* budget, std::string peer_key) {
  budget_ = budget;
  peer_key_ = std::move(peer_key);
  budget_->countIn(peer_key_);
}

void Http2Connection::countOut() {
  if (budget_ == nullptr) return;
  budget_->countOut(peer_key_);
  budget_ = nullptr;
}

void Http2Connection::armCheck(int64_t deadline_us) {
  if (closed_) return;
  if (check_due_us_ != 0 && check_due_us_ <= deadline_us) return;  // it looks earlier anyway
  check_due_us_ = deadline_us;
  const int64_t delay_us = std::max<int64_t>(0, deadline_us - server_->scheduler_.nowUs());
  check_timer_.start(server_->scheduler_, (delay_us + 999) / 1000, alive_.guarded([this] {
    check_due_us_ = 0;
    check();
  }));
}

void Http2Connection::check() {
  if (closed_) return;
  const Http2Options& o = server_->options_;
  const int64_t now = server_->scheduler_.nowUs();
  int64_t next = INT64_MAX;
  auto due = [&](int64_t since_us, int64_t timeout_ms) {
    const int64_t at = since_us + timeout_ms * 1000;
    if (at > now) next = std::min(next, at);
    return at <= now;
  };
  if (!preface_received_ && o.request_timeout_ms > 0 && due(started_us_, o.request_timeout_ms)) {
    SL_LOG(kDebug, "http2.preface_timeout");
    closeNow();
    return;
  }
  if (stalled_since_us_ != 0 && queued_bytes_ > 0 && o.write_timeout_ms > 0 &&
      due(stalled_since_us_, o.write_timeout_ms)) {
    SL_LOG(kDebug, "http2.output_stalled", {"queued_bytes", std::to_string(queued_bytes_)});
    // The socket takes output and the connection's window is open: only some streams' windows
    // are shut (their readers stopped reading). Those streams are reset, and the connection's
    // other calls (a stream hold beside a slow event stream) go on. Otherwise the connection is
    // stuck as a whole and closes.
    // (Submitting RST_STREAM only queues a frame: streams_ is unchanged until it is sent.)
    size_t reset = 0;
    if (!session_dead_ && write_ == nullptr &&
        nghttp2_session_get_remote_window_size(session_.get()) > 0) {
      for (const Http2StreamPtr& s : streams_) {
        if (s->queued_bytes_ > 0 &&
            nghttp2_session_get_stream_remote_window_size(session_.get(), s->id_) <= 0) {
          nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, s->id_, NGHTTP2_CANCEL);
          ++reset;
        }
      }
    }
    if (reset == 0) {
      closeNow();
      return;
    }
    stalled_since_us_ = 0;  // set again by the next flush if output is still held back
    sendPending();
  }
  if (o.request_timeout_ms > 0) {
    // At most max_concurrent_streams to look at, and only when a deadline came.
    bool any_late = false;
    for (const Http2StreamPtr& s : streams_) {
      if (s->request_ended_ || !due(s->opened_us_, o.request_timeout_ms)) continue;
      endRequest(*s);
      // The handler sees the stream close (CANCEL): a request nobody finished is never served.
      nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, s->id_, NGHTTP2_CANCEL);
      any_late = true;
    }
    if (any_late) sendPending();
  }
  if (streams_.empty() && o.idle_timeout_ms > 0 && due(idle_since_us_, o.idle_timeout_ms)) {
    goAway();
    return;
  }
  if (next != INT64_MAX) armCheck(next);
}

bool Http2Connection::countRequestBytes(Http2Stream& s, size_t len) {
  const Http2Options& o = server_->options_;
  if (s.request_ended_) return false;
  if (request_bytes_ + len > o.max_request_bytes_per_connection ||
      server_->request_bytes_ + len > o.max_request_bytes) {
    SL_LOG(kDebug, "http2.request_bytes_over_budget",
           {"connection_bytes", std::to_string(request_bytes_)},
           {"server_bytes", std::to_string(server_->request_bytes_)});
    endRequest(s);
    nghttp2_submit_rst_stream(session_.get(), NGHTTP2_FLAG_NONE, s.id_, NGHTTP2_ENHANCE_YOUR_CALM);
    return false;
  }
  s.request_bytes_ += len;
  request_bytes_ += len;
  server_->request_bytes_ += len;
  return true;
}

void Http2Connection::endRequest(Http2Stream& s) {
  s.request_ended_ = true;
  request_bytes_ -= s.request_bytes_;
  server_->request_bytes_ -= s.request_bytes_;
  s.request_bytes_ = 0;
}

void Http2Connection::onRead(ssize_t nread, const uv_buf_t* buf) {
  if (closed_) return;
  if (nread < 0) {
    closeNow();
    return;
  }
  if (nread == 0 || session_dead_) return;
  in_session_ = true;
  const ssize_t used = nghttp2_session_mem_recv(
      session_.get(), reinterpret_cast<const uint8_t*>(buf->base), static_cast<size_t>(nread));
  in_session_ = false;
  if (closed_) return;
  if (used < 0) {
    // A bad preface, a flood, a protocol error: nghttp2 queued a GOAWAY when it could; send it
    // and close (sendPending closes once nothing is left to do).
    SL_LOG(kDebug, "http2.session_error", {"error", nghttp2_strerror(static_cast<int>(used))});
    // Not HTTP/2 at all, a flood (ACKs the peer does not read), too many CONTINUATIONs: fatal
    // errors, after which nghttp2 may not be called again (protocol errors it answers with a
    // GOAWAY itself, and mem_recv succeeds).
    if (nghttp2_is_fatal(static_cast<int>(used)) != 0) {
      if (used == NGHTTP2_ERR_BAD_CLIENT_MAGIC || used == NGHTTP2_ERR_FLOODED) {
        closeNow();  // not HTTP/2, or a peer that does not read: nothing more to say
      } else {
        failSession(used == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS ? NGHTTP2_ENHANCE_YOUR_CALM
                                                                : NGHTTP2_INTERNAL_ERROR);
      }
      return;
    }
    nghttp2_session_terminate_session(session_.get(), NGHTTP2_PROTOCOL_ERROR);
  }
  // Most reads of a call leave nothing to send (a request whose answer comes on a later turn):
  // no flush then, which would ask nghttp2 for output only to get none. A flush is still due when
  // nghttp2 has frames to send (ACKs, answers given during this read) or wants to read no more
  // (flushNow closes the connection once nothing is left to write); output produced earlier
  // and not written yet waits for its write, whose completion flushes.
  if (nghttp2_session_want_write(session_.get()) != 0 ||
      nghttp2_session_want_read(session_.get()) == 0) {
    sendPending();
  }
}

void Http2Connection::failSession(uint32_t error_code) {
  session_dead_ = true;
  closeStreams();
  // A GOAWAY written by hand (nghttp2 may not be called after a fatal error), then the close.
  const uint32_t last = static_cast<uint32_t>(last_stream_id_) & 0x7fffffffu;
  const unsigned char frame[17] = {0, 0, 8, NGHTTP2_GOAWAY, 0, 0, 0, 0, 0,
                                   static_cast<unsigned char>(last >> 24),
                                   static_cast<unsigned char>(last >> 16),
                                   static_cast<unsigned char>(last >> 8),
                                   static_cast<unsigned char>(last),
                                   static_cast<unsigned char>(error_code >> 24),
                                   static_cast<unsigned char>(error_code >> 16),
                                   static_cast<unsigned char>(error_code >> 8),
                                   static_cast<unsigned char>(error_code)};
  pending_.append(reinterpret_cast<const char*>(frame), sizeof(frame));
  sendPending();
}

void Http2Connection::sendPending() {
  if (closed_) return;
  server_->queueFlush(this);
}

void Http2Connection::flushNow() {
  if (closed_ || in_session_) return;
  for (;;) {
    bool at_limit = false;  // production stopped at kMaxBufferedOutput, not for lack of frames
    while (!session_dead_) {
      if (pending_.size() >= kMaxBufferedOutput ||
          (write_ != nullptr && write_->data.size() >= kMaxBufferedOutput)) {
        at_limit = true;
        break;
      }
      const uint8_t* data = nullptr;
      in_session_ = true;
      const ssize_t n = nghttp2_session_mem_send(session_.get(), &data);
      in_session_ = false;
      if (closed_) return;
      if (n < 0) {
        closeNow();
        return;
      }
      if (n == 0) break;
      pending_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (write_ != nullptr || pending_.empty()) break;
    if (!writePending()) return;
    // Everything taken by the socket at once: produce what waited behind the limit.
    if (write_ != nullptr || !at_limit) break;
  }
  if (write_ == nullptr && pending_.empty() &&
      (session_dead_ || (nghttp2_session_want_read(session_.get()) == 0 &&
                         nghttp2_session_want_write(session_.get()) == 0))) {
    closeNow();
    return;
  }
  // Response bytes left in the streams after nghttp2 produced all it could: the client's window
  // (or the socket) holds them back. If nothing moves for write_timeout_ms, check() resets the
  // streams whose window is shut, or closes the connection when it is stuck as a whole.
  if (queued_bytes_ > 0 && stalled_since_us_ == 0 && server_->options_.write_timeout_ms > 0) {
    stalled_since_us_ = server_->scheduler_.nowUs();
    armCheck(stalled_since_us_ + server_->options_.write_timeout_ms * 1000);
  }
}

bool Http2Connection::writePending() {
  // Most answers fit the socket buffer: a direct write, as HttpServer's connections do. A
  // uv_write that completes at once still finishes through libuv's pending queue, which costs a
  // zero-timeout epoll_wait and an epoll_ctl (its POLLOUT interest dropped) per write: measured
  // at one call at a time, two syscalls per call more than HTTP/1.1.
  uv_buf_t buf = uv_buf_init(pending_.data(), static_cast<unsigned>(pending_.size()));
  int n = uv_try_write(stream_.get(), &buf, 1);
  if (n == UV_EAGAIN || n == UV_ENOSYS) n = 0;
  if (n < 0) {
    closeNow();
    return false;
  }
  if (static_cast<size_t>(n) == pending_.size()) {
    pending_.clear();  // its capacity is kept for the next answers
    return true;
  }
  pending_.erase(0, static_cast<size_t>(n));
  startWrite();
  return !closed_;
}

void Http2Connection::startWrite() {
  write_ = new WriteReq();
  write_->owner = this;
  write_->data.swap(pending_);
  uv_buf_t b = uv_buf_init(write_->data.data(), static_cast<unsigned>(write_->data.size()));
  int rc = uv_write(&write_->req, stream_.get(), &b, 1, [](uv_write_t* req, int status) {
    auto* w = reinterpret_cast<WriteReq*>(req);
    Http2Connection* owner = w->owner;
    delete w;
    if (owner != nullptr) owner->onWritten(status);
  });
  if (rc != 0) {
    delete write_;
    write_ = nullptr;
    closeNow();
    return;
  }
  if (server_->options_.write_timeout_ms > 0) {
    write_timer_.start(server_->scheduler_, server_->options_.write_timeout_ms,
                       alive_.guarded([this] {
                         SL_LOG(kDebug, "http2.write_timeout");
                         closeNow();
                       }));
  }
}

void Http2Connection::onWritten(int status) {
  write_ = nullptr;
  write_timer_.reset();
  if (status != 0) {
    closeNow();
    return;
  }
  sendPending();
}

void Http2Connection::goAway() {
  if (closed_ || session_dead_) return;
  nghttp2_submit_goaway(session_.get(), NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_.get()), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  // Once the GOAWAY is out and no stream is open, nghttp2 wants neither to read nor to write.
  sendPending();
}

bool Http2Connection::attach(Http2StreamPtr s) {
  if (nghttp2_session_set_stream_user_data(session_.get(), s->id_, s.get()) != 0) return false;
  s->slot_ = streams_.size();
  last_found_ = s.get();
  streams_.push_back(std::move(s));
  return true;
}

Http2StreamPtr Http2Connection::detach(Http2Stream* s, bool nghttp2_closing) {
  const size_t slot = s->slot_;
  Http2StreamPtr owned = std::move(streams_[slot]);
  if (slot + 1 != streams_.size()) {
    streams_[slot] = std::move(streams_.back());
    streams_[slot]->slot_ = slot;
  }
  streams_.pop_back();
  if (last_found_ == s) last_found_ = nullptr;
  if (!s->request_ended_) endRequest(*s);
  releaseQueued(s->queued_bytes_);
  s->queued_bytes_ = 0;
  if (queued_bytes_ == 0) stalled_since_us_ = 0;  // what was stuck left with its stream
  if (streams_.empty()) {
    idle_since_us_ = server_->scheduler_.nowUs();
    // The timer may be armed for nothing now, or not at all (it fired while this stream was
    // open): the idle deadline needs it.
    if (server_->options_.idle_timeout_ms > 0) {
      armCheck(idle_since_us_ + server_->options_.idle_timeout_ms * 1000);
    }
  }
  // A stream the connection lets go while nghttp2 keeps it (the connection closes, maybe from a
  // callback inside nghttp2_session_mem_recv, which then goes on) must not be found through a
  // pointer to it any more.
  if (!nghttp2_closing) nghttp2_session_set_stream_user_data(session_.get(), s->id_, nullptr);
  s->connection_ = nullptr;
  return owned;
}

void Http2Connection::closeStreams() {
  while (!streams_.empty()) {
    Http2StreamPtr s = detach(streams_.back().get(), false);
    if (auto cb = std::move(s->on_close_)) cb(false);
  }
}

void Http2Connection::closeNow() {
  if (closed_) return;
  closed_ = true;
  if (flush_queued_) server_->unqueueFlush(this);
  check_timer_.reset();
  check_due_us_ = 0;
  write_timer_.reset();
  countOut();  // its slot is free at once (an eviction admits the newcomer now)
  stream_.close();
  closeStreams();
  Http2Server* server = server_;
  server->scheduler_.post(server->alive_.guarded([server, self = this] {
    server->destroyConnection(self);
  }));
}

int Http2Connection::onBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  // A connection closed from a callback inside nghttp2_session_mem_recv takes no new stream.
  if (c->closed_) return 0;
  auto s = std::make_shared<Http2Stream>();
  s->connection_ = c;
  s->id_ = frame->hd.stream_id;
  s->peer_ = c->peer_;
  s->headers_.reserve(8);  // more than a gRPC call's usual count (its pseudo-headers kept apart)
  s->opened_us_ = c->server_->scheduler_.nowUs();
  c->last_stream_id_ = std::max(c->last_stream_id_, s->id_);
  if (c->server_->options_.request_timeout_ms > 0) {
    c->armCheck(s->opened_us_ + c->server_->options_.request_timeout_ms * 1000);
  }
  // nghttp2 opened its stream before this callback: attaching cannot fail.
  if (!SL_INVARIANT(c->attach(std::move(s)), "http2.attach_stream")) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // nghttp2 resets the stream
  }
  return 0;
}

int Http2Connection::onHeader(nghttp2_session* session, const nghttp2_frame* frame,
                              const uint8_t* name, size_t namelen, const uint8_t* value,
                              size_t valuelen, uint8_t, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  Http2Stream* s = c->find(frame->hd.stream_id);
  if (s == nullptr) return 0;
  // The header list is counted as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 6.5.2); over
  // the limit nothing more of it is kept (the HPACK bomb: a small frame that decodes into a huge
  // list). A request's stream still goes to the handler, marked headersTooLarge(), so that the
  // client learns why (gRPC: RESOURCE_EXHAUSTED; a REFUSED_STREAM reads as "retry elsewhere");
  // trailers that large reset the stream.
  if (s->headers_too_large_) return 0;
  s->header_bytes_ += namelen + valuelen + 32;
  if (s->header_bytes_ > static_cast<size_t>(c->server_->options_.max_header_list_bytes)) {
    s->pseudo_headers_ = {};
    s->headers_.clear();
    s->headers_.shrink_to_fit();
    if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      s->headers_too_large_ = true;
      return 0;
    }
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id_, NGHTTP2_REFUSED_STREAM);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers: not kept
  const std::string_view field_name(reinterpret_cast<const char*>(name), namelen);
  if (!field_name.empty() && field_name[0] == ':') {
    // nghttp2 passes on only the pseudo-headers a request may have (RFC 9113 8.3.1), once each.
    std::string* kept = field_name == ":method"      ? &s->pseudo_headers_.method
                        : field_name == ":path"      ? &s->pseudo_headers_.path
                        : field_name == ":authority" ? &s->pseudo_headers_.authority
                        : field_name == ":scheme"    ? &s->pseudo_headers_.scheme
                                                     : nullptr;
    if (kept != nullptr) kept->assign(reinterpret_cast<const char*>(value), valuelen);
    return 0;
  }
  // Both strings built in place in the vector's pair (no temporaries moved in).
  s->headers_.emplace_back(std::piecewise_construct,
                           std::forward_as_tuple(reinterpret_cast<const char*>(name), namelen),
                           std::forward_as_tuple(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}

int Http2Connection::onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) {
    if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
      c->preface_received_ = true;
    }
    return 0;
  }
  Http2Stream* found = c->find(frame->hd.stream_id);
  if (found == nullptr) return 0;
  Http2StreamPtr s = c->streams_[found->slot_];  // the callbacks below may close it
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    if (c->server_->handler_) c->server_->handler_(s);
  }
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 && s->connection_ != nullptr &&
      !s->request_ended_) {
    c->endRequest(*s);
    if (auto cb = std::move(s->on_end_)) cb();
  }
  return 0;
}

int Http2Connection::onBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  c->ending_data_stream_ =
      hd->type == NGHTTP2_DATA && (hd->flags & NGHTTP2_FLAG_END_STREAM) != 0 ? hd->stream_id : 0;
  return 0;
}

int Http2Connection::onDataChunk(nghttp2_session*, uint8_t, int32_t stream_id,
                                 const uint8_t* data, size_t len, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  Http2Stream* s = c->find(stream_id);
  if (s == nullptr) return 0;
  // The chunks of a request's last DATA frame are handed on and the request dispatched at once:
  // not counted, so that a call whose body fits one frame is served however full the budgets
  // are (a client filling them with requests it never ends must not refuse everyone else's).
  if (stream_id != c->ending_data_stream_ && !c->countRequestBytes(*s, len)) return 0;
  if (s->request_ended_) return 0;  // reset over its budget or its time
  if (s->on_data_) s->on_data_(std::string_view(reinterpret_cast<const char*>(data), len));
  return 0;
}

int Http2Connection::onStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                                   void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  Http2Stream* found = c->find(stream_id);
  if (found == nullptr) return 0;
  Http2StreamPtr s = c->detach(found, true);
  if (auto cb = std::move(s->on_close_)) cb(s->end_sent_ && error_code == NGHTTP2_NO_ERROR);
  return 0;
}

int Http2Connection::onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<Http2Connection*>(user);
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) return 0;
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  if (Http2Stream* s = c->find(frame->hd.stream_id)) s->end_sent_ = true;
  return 0;
}

// --- Http2Stream -------------------------------------------------------------------------------

/// The nghttp2 data provider's view of a stream's queued body.
struct Http2StreamAccess {
  static ssize_t read(Http2Stream& s, nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                      size_t length, uint32_t* data_flags);
};

namespace {

ssize_t readBody(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                 uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* s = static_cast<Http2Stream*>(source->ptr);
  return Http2StreamAccess::read(*s, session, stream_id, buf, length, data_flags);
}

}  // namespace

std::string_view Http2Stream::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers_) {
    if (name == lower_name) return value;
  }
  return {};
}

bool Http2Stream::respond(std::span<const Http2Field> fields, bool end_stream) {
  if (!open() || responded_) return false;
  responded_ = true;
  const NvList nv(fields);
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = readBody;
  if (end_stream) ending_ = true;
  int rc = nghttp2_submit_response(connection_->session(), id_, nv.data(), nv.size(),
                                   end_stream ? nullptr : &provider);
  if (rc != 0) return false;
  connection_->sendPending();
  return true;
}

bool Http2Stream::write(std::string data) {
  if (!open() || !responded_) return false;
  if (!connection_->mayQueue(queued_bytes_, data.size())) {
    // Reset on a later turn: the caller is inside its own write (src/README.md, rule 4).
    ending_ = true;
    connection_->postReset(id_);
    return false;
  }
  queued_bytes_ += data.size();
  connection_->addQueued(data.size());
  if (out_offset_ == out_.size()) {
    out_ = std::move(data);
    out_offset_ = 0;
  } else {
    // A stream a client reads slowly: drop what nghttp2 already took before growing the buffer.
    if (out_offset_ > out_.size() / 2) {
      out_.erase(0, out_offset_);
      out_offset_ = 0;
    }
    out_.append(data);
  }
  resume();
  return true;
}

bool Http2Stream::end(std::span<const Http2Field> trailers) {
  if (!open() || !responded_) return false;
  ending_ = true;
  trailer_count_ = trailers.size();
  Http2Field* kept = trailers_inline_.data();
  if (trailers.size() > kInlineTrailers) {
    trailers_more_.resize(trailers.size());
    kept = trailers_more_.data();
  }
  // The fields not made by literal() may name the caller's temporaries: their bytes are copied
  // into one buffer (reserved first, so that the views into it stay valid).
  size_t copied_bytes = 0;
  for (const Http2Field& field : trailers) {
    if (!field.is_static) copied_bytes += field.name.size() + field.value.size();
  }
  trailer_bytes_.clear();
  trailer_bytes_.reserve(copied_bytes);
  for (const Http2Field& field : trailers) {
    if (field.is_static) {
      *kept++ = field;
      continue;
    }
    const size_t at = trailer_bytes_.size();
    trailer_bytes_.append(field.name);
    trailer_bytes_.append(field.value);
    const std::string_view bytes(trailer_bytes_);
    *kept++ = Http2Field(bytes.substr(at, field.name.size()),
                         bytes.substr(at + field.name.size(), field.value.size()));
  }
  resume();
  return true;
}

std::span<const Http2Field> Http2Stream::trailers() const {
  return {trailer_count_ > kInlineTrailers ? trailers_more_.data() : trailers_inline_.data(),
          trailer_count_};
}

void Http2Stream::reset(uint32_t error_code) {
  if (connection_ == nullptr) return;
  nghttp2_submit_rst_stream(connection_->session(), NGHTTP2_FLAG_NONE, id_, error_code);
  connection_->sendPending();
}

void Http2Stream::resume() {
  if (connection_ == nullptr) return;
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(connection_->session(), id_);
  }
  connection_->sendPending();
}

ssize_t Http2StreamAccess::read(Http2Stream& s, nghttp2_session* session, int32_t stream_id,
                                uint8_t* buf, size_t length, uint32_t* data_flags) {
  const size_t copied = std::min(length, s.out_.size() - s.out_offset_);
  memcpy(buf, s.out_.data() + s.out_offset_, copied);
  s.out_offset_ += copied;
  s.queued_bytes_ -= copied;
  if (copied != 0 && s.connection_ != nullptr) s.connection_->tookQueued(copied);
  if (s.out_offset_ == s.out_.size()) {
    s.out_.clear();
    s.out_offset_ = 0;
  }
  if (s.out_offset_ == s.out_.size() && s.ending_) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s.trailer_count_ != 0) {
      const NvList nv(s.trailers());
      // nghttp2 copies the fields it must (NvList): the stream's copies need not outlive this.
      if (nghttp2_submit_trailer(session, stream_id, nv.data(), nv.size()) == 0) {
        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
    return static_cast<ssize_t>(copied);
  }
  if (copied == 0) {
    s.deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(copied);
}

// --- Http2Server -------------------------------------------------------------------------------

Http2Server::Http2Server(uv_loop_t* loop, event::Scheduler& scheduler, const Http2Options& options,
                         StreamHandler handler)
    : scheduler_(scheduler),
      options_(options),
      handler_(std::move(handler)),
      tcp_(loop),
      unix_(loop),
      memory_(std::make_unique<Http2Memory>()),
      read_buffer_(kReadBufferSize) {
  // Only fails on a bad loop pointer.
  if (uv_prepare_init(loop, flush_prepare_.allocate(this)) != 0) abort();
}

Http2Server::~Http2Server() {
  close();
  connections_.clear();
}

Status Http2Server::listenTcp(std::string_view host_port) {
  if (closed_) return unavailable("server is closed");
  return tcp_.listenTcp(host_port, kListenBacklog, [this] { onConnection(tcp_, tcp_budget_); });
}

Status Http2Server::listenUnix(const std::string& path, uint32_t mode, int64_t gid) {
  if (closed_) return unavailable("server is closed");
  return unix_.listenUnix(
      path, mode, kListenBacklog, [this] { onConnection(unix_, unix_budget_); }, gid);
}

void Http2Server::onConnection(event::StreamListener& listener, ListenerBudget& budget) {
  auto connection = std::make_unique<Http2Connection>(this);
  if (!listener.accept(connection->stream(), connection.get()).isOk()) return;
  if (closed_ || draining_) return;  // the destructor closes the stream
  auto peer = std::make_shared<const PeerIdentity>(identifyPeer(connection->stream().get()));
  std::string peer_key = options_.max_connections_per_peer > 0 ? peer->key() : std::string();
  if (!budget.makeRoom(
          peer_key, options_.max_connections, options_.max_connections_per_peer,
          [&](const std::string* of_peer) { return evictLongestIdle(budget, of_peer); })) {
    SL_LOG(kDebug, "http2.connection_refused", {"peer", peer->key()});
    return;
  }
  connection->countIn(&budget, std::move(peer_key));
  Http2Connection* c = connection.get();
  connections_.emplace(c, std::move(connection));
  if (!c->start(std::move(peer)).isOk()) c->closeNow();
}

bool Http2Server::evictLongestIdle(const ListenerBudget& budget, const std::string* peer_key) {
  // A linear scan, as HttpServer's: it runs only when a listener is full.
  Http2Connection* victim = nullptr;
  for (auto& [c, owned] : connections_) {
    if (c->budget() != &budget || c->idleSinceUs() == 0) continue;
    if (peer_key != nullptr && c->peerKey() != *peer_key) continue;
    if (victim == nullptr || c->idleSinceUs() < victim->idleSinceUs()) victim = c;
  }
  if (victim == nullptr) return false;
  SL_LOG(kDebug, "http2.connection_evicted");
  victim->evict();
  return true;
}

void Http2Server::destroyConnection(Http2Connection* connection) {
  connections_.erase(connection);
}

void Http2Server::queueFlush(Http2Connection* connection) {
  if (connection->flush_queued_ || !flush_prepare_) return;
  connection->flush_queued_ = true;
  flush_queue_.push_back(connection);
  if (flush_queue_.size() == 1) {
    uv_prepare_start(flush_prepare_.get(), [](uv_prepare_t* h) {
      if (h->data != nullptr) static_cast<Http2Server*>(h->data)->flushQueued();
    });
  }
}

void Http2Server::unqueueFlush(Http2Connection* connection) {
  connection->flush_queued_ = false;
  std::erase(flush_queue_, connection);
}

void Http2Server::flushQueued() {
  // One at a time: a flush may close its connection (closeNow takes it out of the queue) or, by
  // a stream's callback, queue another.
  while (!flush_queue_.empty()) {
    Http2Connection* c = flush_queue_.back();
    flush_queue_.pop_back();
    c->flush_queued_ = false;
    c->flushNow();
  }
  uv_prepare_stop(flush_prepare_.get());
}

size_t Http2Server::streamCount() const {
  size_t streams = 0;
  for (const auto& [raw, connection] : connections_) streams += connection->openStreams();
  return streams;
}

void Http2Server::stopAccepting() {
  tcp_.close();
  unix_.close();
  if (draining_) return;
  draining_ = true;
  std::vector<Http2Connection*> all;
  for (auto& [c, owned] : connections_) all.push_back(c);
  for (Http2Connection* c : all) c->goAway();
}

void Http2Server::close(std::function<void()> done) {
  tcp_.close();
  unix_.close();
  closed_ = true;
  draining_ = true;
  std::vector<Http2Connection*> all;
  for (auto& [c, owned] : connections_) all.push_back(c);
  for (Http2Connection* c : all) c->closeNow();
  flush_prepare_.close();
  if (done) scheduler_.post(std::move(done));
}

}  // namespace sidelock::http
