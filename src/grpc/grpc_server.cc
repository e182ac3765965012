#include "grpc/grpc_server.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <span>
#include <utility>

#include "common/percent_encoding.h"
#include "http/access_policy.h"
#include "http/http_error.h"

namespace sidelock::grpc {
namespace {

constexpr size_t kPrefixBytes = kMessagePrefixRoom;  // compressed flag, 4-byte big-endian length

using http::errorBody;
using http::Http2Field;

/// The status messages the transport answers itself are JSON error bodies too, as the routes'
/// (README, "gRPC status codes"): a client may parse every grpc-message alike.
std::string deadlineExceeded() {
  return errorBody("request_timeout", "the call's deadline (grpc-timeout) passed");
}
std::string oneMessagePerCall() {
  return errorBody("not_implemented", "sidelock serves one request message per call");
}

// The response headers of every call; literals, so nghttp2 encodes them without copying them.
constexpr std::array<Http2Field, 3> kResponseHeaders = {
    Http2Field::literal(":status", "200"), Http2Field::literal("content-type", "application/grpc"),
    Http2Field::literal("grpc-accept-encoding", "identity")};

// grpc-status of each StatusCode (the enumerators are 0 to 16 in order): ending a call formats
// nothing and copies nothing.
constexpr std::array<Http2Field, 17> kStatusTrailers = {
    Http2Field::literal("grpc-status", "0"),  Http2Field::literal("grpc-status", "1"),
    Http2Field::literal("grpc-status", "2"),  Http2Field::literal("grpc-status", "3"),
    Http2Field::literal("grpc-status", "4"),  Http2Field::literal("grpc-status", "5"),
    Http2Field::literal("grpc-status", "6"),  Http2Field::literal("grpc-status", "7"),
    Http2Field::literal("grpc-status", "8"),  Http2Field::literal("grpc-status", "9"),
    Http2Field::literal("grpc-status", "10"), Http2Field::literal("grpc-status", "11"),
    Http2Field::literal("grpc-status", "12"), Http2Field::literal("grpc-status", "13"),
    Http2Field::literal("grpc-status", "14"), Http2Field::literal("grpc-status", "15"),
    Http2Field::literal("grpc-status", "16")};
static_assert(static_cast<size_t>(StatusCode::kUnauthenticated) + 1 == kStatusTrailers.size());

bool isGrpcContentType(std::string_view ct) {
  constexpr std::string_view kGrpc = "application/grpc";
  if (ct.substr(0, kGrpc.size()) != kGrpc) return false;
  // "application/grpc", "application/grpc+proto", "application/grpc;..." (any +codec is
  // passed on: the handler's messages are opaque).
  return ct.size() == kGrpc.size() || ct[kGrpc.size()] == '+' || ct[kGrpc.size()] == ';';
}

/// One RPC on one HTTP/2 stream.
class GrpcCall final : public ServerCall, public std::enable_shared_from_this<GrpcCall> {
 public:
  /// `handler` is the server's: it outlives every call's stream (GrpcServer destroys its transport,
  /// which closes every stream, before its handler), and the call runs it only while the stream
  /// is open (onEnd), so the call refers to it instead of copying it.
  GrpcCall(event::Scheduler& scheduler, const GrpcServerOptions& options,
           const CallHandler& handler, http::Http2StreamPtr stream)
      : scheduler_(scheduler),
        max_message_bytes_(options.max_message_bytes),
        on_refused_(options.on_refused),
        handler_(handler),
        stream_(std::move(stream)) {}

  void start();

  const CallInfo& info() const override { return info_; }
  bool sendMessage(std::string serialized) override;
  void finish(StatusCode code, std::string_view message) override;
  bool active() const override { return !finished_ && !gone_ && stream_->open(); }
  void onCancelled(std::function<void()> cb) override { on_cancelled_ = std::move(cb); }
  void onUndelivered(std::function<void()> cb) override { on_undelivered_ = std::move(cb); }

 private:
  void onData(std::string_view data);
  void onEnd();
  void onClose(bool answered);
  void cancel();
  /// An HTTP-level refusal (not a gRPC request at all), `status` the :status field, counted as
  /// `http_status`.
  void refuseHttp(const Http2Field& status, int http_status);
  /// A call the transport answers itself, before its handler saw it: counted (on_refused) as the
  /// HTTP status the refusal stands for, then finished.
  void refuse(int http_status, StatusCode code, std::string_view message);

  event::Scheduler& scheduler_;
  size_t max_message_bytes_;
  const std::function<void(int)>& on_refused_;  // the server's options outlive its calls
  const CallHandler& handler_;
  http::Http2StreamPtr stream_;
  CallInfo info_;
  std::string buffer_;  // request bytes so far (prefix included)
  std::optional<size_t> expected_;  // prefix + length, once the prefix arrived
  bool dispatched_ = false;
  bool headers_sent_ = false;
  bool sent_message_ = false;
  bool finished_ = false;
  bool gone_ = false;
  std::function<void()> on_cancelled_;
  std::function<void()> on_undelivered_;
  event::ScopedTimer deadline_;
  /// The call itself, from start() until its stream closes (onClose drops it): the stream's close
  /// callback then holds a plain pointer, which fits std::function's inline buffer where a
  /// captured shared_ptr would cost an allocation per call.
  std::shared_ptr<GrpcCall> self_;
};

/// The header fields GrpcCall::start() reads besides the pseudo-headers, each the first field of
/// its name ("" if absent), found in one pass over the fields instead of one search per name.
struct RequestFields {
  explicit RequestFields(const std::vector<http::Http2Header>& fields) {
    for (const auto& [field_name, value] : fields) {
      // Compared as views: the lengths first, then the bytes.
      const std::string_view name = field_name;
      std::string_view* slot = nullptr;
      if (name == "content-type") {
        slot = &content_type;
      } else if (name == "te") {
        slot = &te;
      } else if (name == "grpc-timeout") {
        slot = &timeout;
      } else if (name == "host") {
        slot = &host;
      }
      if (slot != nullptr && slot->data() == nullptr) *slot = value;
    }
  }

  // Views of the fields' strings (null data if absent).
  std::string_view content_type;
  std::string_view te;
  std::string_view timeout;
  std::string_view host;
};

void GrpcCall::start() {
  // The call holds itself (self_) until the stream closes: every stream closes once, on every
  // path (answered, reset, connection gone: Http2Connection::closeStreams), and its close callback
  // drops self_ last. The three callbacks run only while the stream has not closed, so they hold a
  // plain pointer (no allocation: it fits std::function's inline buffer).
  self_ = shared_from_this();
  stream_->onClose([this](bool answered) { onClose(answered); });
  // The header strings move into the call's info instead of being copied: the pseudo-headers
  // into its fields, the others (Http2Stream keeps them apart) as its metadata.
  if (stream_->headersTooLarge()) {
    // Answered (trailers-only) rather than reset: REFUSED_STREAM would read as "retry elsewhere".
    return refuse(
        431, StatusCode::kResourceExhausted,
        errorBody("headers_too_large",
                  "the call's metadata is over listen.grpc_limits.max_header_list_bytes"));
  }
  http::Http2PseudoHeaders& pseudo = stream_->pseudoHeaders();
  info_.metadata = stream_->takeHeaders();
  const RequestFields request(info_.metadata);  // views into info_.metadata
  if (pseudo.method != "POST") return refuseHttp(Http2Field::literal(":status", "405"), 405);
  if (!isGrpcContentType(request.content_type)) {
    return refuseHttp(Http2Field::literal(":status", "415"), 415);
  }
  info_.method = std::move(pseudo.path);
  if (!pseudo.authority.empty()) {
    info_.authority = std::move(pseudo.authority);
  } else {
    info_.authority = request.host;  // host stays in the metadata too
  }
  const bool has_te_trailers = request.te == "trailers";
  std::optional<int64_t> timeout_us;
  if (!request.timeout.empty()) timeout_us = parseGrpcTimeout(request.timeout);
  const bool timeout_malformed = !request.timeout.empty() && !timeout_us;
  info_.peer = stream_->peer() ? stream_->peer() : std::make_shared<const http::PeerIdentity>();
  if (!has_te_trailers) {
    return refuse(400, StatusCode::kInternal,
                  errorBody("bad_request", "the request lacks \"te: trailers\""));
  }
  if (timeout_malformed) {
    return refuse(400, StatusCode::kInternal, errorBody("bad_request", "malformed grpc-timeout"));
  }
  if (info_.peer->transport != http::PeerIdentity::Transport::kUnix &&
      !http::isValidHostField(info_.authority)) {
    // As the HTTP/1.1 listener answers such a Host (400): "localhost:abc" is no loopback name.
    // Not on the Unix socket, where a name is no address. (An :authority that is a path never
    // gets here: nghttp2 resets the stream for its '/'.)
    return refuse(400, StatusCode::kInvalidArgument,
                  errorBody("bad_request", "the :authority is not host[:port]"));
  }
  if (timeout_us) {
    // The call ends a little before the client's deadline, never at it: the client's clock
    // started before the request left it, and an answer that reaches it after its deadline is
    // thrown away by its gRPC library. A lock granted in that gap would then be held by nobody
    // for its whole TTL (or renewed by the watchdog up to max_hold_ms). Ended earlier, the call
    // withdraws its waiter, and a grant that still comes is given back (undelivered).
    const int64_t margin_us = deadlineMarginUs(*timeout_us);
    const int64_t effective_us = std::max<int64_t>(0, *timeout_us - margin_us);
    // Nothing left once the margin is taken (grpc-timeout of 2 ms or less): the call ends now,
    // before its request could be dispatched and answered (a cached reply answers at once).
    if (effective_us == 0) return refuse(408, StatusCode::kDeadlineExceeded, deadlineExceeded());
    info_.deadline_us = scheduler_.nowUs() + effective_us;
    deadline_.start(scheduler_, effective_us / 1000, [weak = weak_from_this()] {
      auto self = weak.lock();
      if (!self || !self->active()) return;
      // finish() may close the stream at once (the client's side has ended), which drops the
      // callback: take it first.
      auto cancelled = std::move(self->on_cancelled_);
      if (self->dispatched_) {  // its route counts it
        self->finish(StatusCode::kDeadlineExceeded, deadlineExceeded());
      } else {
        self->refuse(408, StatusCode::kDeadlineExceeded, deadlineExceeded());
      }
      if (cancelled) cancelled();
    });
  }
  // A compressed message (grpc-encoding) is refused when it arrives (its flag), not here.
  stream_->onData([this](std::string_view data) { onData(data); });
  stream_->onEnd([this] { onEnd(); });
}

void GrpcCall::refuse(int http_status, StatusCode code, std::string_view message) {
  if (on_refused_) on_refused_(http_status);
  finish(code, message);
}

void GrpcCall::refuseHttp(const Http2Field& status, int http_status) {
  if (on_refused_) on_refused_(http_status);
  finished_ = true;
  stream_->respond({&status, 1}, true);
}

void GrpcCall::onData(std::string_view data) {
  if (finished_ || gone_) return;
  if (dispatched_) {
    return finish(StatusCode::kUnimplemented, oneMessagePerCall());
  }
  buffer_.append(data);
  if (!expected_ && buffer_.size() >= kPrefixBytes) {
    const auto* p = reinterpret_cast<const uint8_t*>(buffer_.data());
    if (p[0] != 0) {
      return refuse(501, StatusCode::kUnimplemented,
                    errorBody("not_implemented",
                              "compressed messages are not supported "
                              "(grpc-accept-encoding: identity)"));
    }
    const size_t length = (size_t{p[1]} << 24) | (size_t{p[2]} << 16) | (size_t{p[3]} << 8) | p[4];
    if (length > max_message_bytes_) {
      buffer_.clear();
      return refuse(
          413, StatusCode::kResourceExhausted,
          errorBody("payload_too_large", "request message of " + std::to_string(length) +
                                             " bytes is over the " +
                                             std::to_string(max_message_bytes_) + "-byte limit"));
    }
    expected_ = kPrefixBytes + length;
  }
  if (expected_ && buffer_.size() > *expected_) {
    return refuse(501, StatusCode::kUnimplemented, oneMessagePerCall());
  }
}

void GrpcCall::onEnd() {
  if (finished_ || gone_) return;
  if (!expected_ || buffer_.size() != *expected_) {
    return refuse(400, StatusCode::kInternal,
                  errorBody("bad_request", buffer_.empty() ? "the call carried no request message"
                                                           : "truncated request message"));
  }
  info_.received_us = scheduler_.nowUs();
  if (info_.deadline_us && info_.received_us >= *info_.deadline_us) {
    // The request ended after the sidecar's deadline, whose timer has not run yet.
    return refuse(408, StatusCode::kDeadlineExceeded, deadlineExceeded());
  }
  dispatched_ = true;
  buffer_.erase(0, kPrefixBytes);
  std::string request = std::move(buffer_);
  buffer_ = std::string();
  // self_ is set: the stream is open (onClose drops it).
  if (handler_) handler_(self_, std::move(request));
}

bool GrpcCall::sendMessage(std::string serialized) {
  if (!active()) return false;
  if (!headers_sent_) {
    headers_sent_ = true;
    if (!stream_->respond(kResponseHeaders, false)) return false;
  }
  const auto n = static_cast<uint32_t>(serialized.size());
  const char prefix[kPrefixBytes] = {'\0', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                                     static_cast<char>(n >> 8), static_cast<char>(n)};
  // A message with room for the prefix (ServerCall::sendMessage) is framed in place: no second
  // buffer, no copy of the message.
  if (serialized.capacity() - serialized.size() >= kPrefixBytes) {
    const size_t size = serialized.size();
    serialized.resize(size + kPrefixBytes);  // within the capacity: no allocation
    memmove(serialized.data() + kPrefixBytes, serialized.data(), size);
    memcpy(serialized.data(), prefix, kPrefixBytes);
    if (!stream_->write(std::move(serialized))) return false;
    sent_message_ = true;
    return true;
  }
  std::string framed;
  framed.reserve(kPrefixBytes + serialized.size());
  framed.append(prefix, kPrefixBytes);
  framed.append(serialized);
  if (!stream_->write(std::move(framed))) return false;
  sent_message_ = true;
  return true;
}

void GrpcCall::finish(StatusCode code, std::string_view message) {
  if (!active()) return;
  finished_ = true;
  deadline_.reset();
  // The response headers (for trailers-only), then grpc-status and grpc-message: on the stack.
  std::array<Http2Field, kResponseHeaders.size() + 2> fields;
  std::copy(kResponseHeaders.begin(), kResponseHeaders.end(), fields.begin());
  size_t count = kResponseHeaders.size();
  const auto index = static_cast<size_t>(code);
  std::string other_code;  // a value no enumerator names: formatted, and copied by the stream
  if (index < kStatusTrailers.size()) {
    fields[count++] = kStatusTrailers[index];
  } else {
    other_code = std::to_string(static_cast<int>(code));
    fields[count++] = Http2Field("grpc-status", other_code);
  }
  std::string encoded;
  // A JSON body written for HTTP ends with a newline: not part of the status message.
  while (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  if (!message.empty()) {
    encoded = percentEncode(message, PercentKeep::kGrpcMessage);
    fields[count++] = Http2Field("grpc-message", encoded);
  }
  const std::span<const Http2Field> all(fields.data(), count);
  if (headers_sent_) {
    stream_->end(all.subspan(kResponseHeaders.size()));
    return;
  }
  // Trailers-only: one HEADERS frame with END_STREAM.
  headers_sent_ = true;
  stream_->respond(all, true);
}

void GrpcCall::cancel() {
  // Posted: the close may come from inside the handler's own sendMessage() / finish()
  // (src/README.md, rule 4).
  if (auto cb = std::move(on_cancelled_)) scheduler_.post(std::move(cb));
}

void GrpcCall::onClose(bool answered) {
  deadline_.reset();
  if (!finished_) {
    gone_ = true;
    cancel();
  } else if (!answered && sent_message_ && on_undelivered_) {
    // The answer was given but the stream was reset or the connection lost before it left.
    scheduler_.post([cb = std::move(on_undelivered_)] { cb(); });
  }
  on_cancelled_ = nullptr;
  on_undelivered_ = nullptr;
  stream_->onData(nullptr);
  stream_->onEnd(nullptr);
  // Last: this may destroy the call (when nobody else holds it). The stream's close callback that
  // runs this was moved out of the stream before it was called (Http2Connection::onStreamClose,
  // closeStreams), so it is not destroyed under itself.
  auto keep = std::move(self_);
}

}  // namespace

std::string_view CallInfo::header(std::string_view lower_name) const {
  for (const auto& [name, value] : metadata) {
    if (name == lower_name) return value;
  }
  return {};
}

std::optional<int64_t> parseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (char ch : value.substr(0, value.size() - 1)) {
    if (ch < '0' || ch > '9') return std::nullopt;
    n = n * 10 + (ch - '0');
  }
  int64_t us = 0;
  switch (value.back()) {
    case 'H': us = n * 3'600'000'000; break;
    case 'M': us = n * 60'000'000; break;
    case 'S': us = n * 1'000'000; break;
    case 'm': us = n * 1'000; break;
    case 'u': us = n; break;
    case 'n': us = n / 1000; break;
    default: return std::nullopt;
  }
  return us < 1 ? 1 : us;
}

CallHandler unimplementedHandler() {
  return [](CallPtr call, std::string) {
    call->finish(
        StatusCode::kUnimplemented,
        errorBody("not_implemented", "sidelock: method " + call->info().method + " is not served"));
  };
}

GrpcServer::GrpcServer(uv_loop_t* loop, event::Scheduler& scheduler,
                       const GrpcServerOptions& options, CallHandler handler)
    : scheduler_(scheduler),
      options_(options),
      handler_(std::move(handler)),
      transport_(loop, scheduler, options.http2,
                 [this](http::Http2StreamPtr stream) { onStream(std::move(stream)); }) {}

void GrpcServer::onStream(http::Http2StreamPtr stream) {
  auto call = std::make_shared<GrpcCall>(scheduler_, options_, handler_, std::move(stream));
  call->start();
}

}  // namespace sidelock::grpc
