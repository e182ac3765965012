// The client side of `POST /v1/locks/{name}/acquire` with `hold: "stream"` and of
// `POST /v1/elections/{name}/campaign`: builds the request and parses the answer, which is either
// a chunked NDJSON event stream (200, application/x-ndjson) or an ordinary JSON refusal (409
// locked, 4xx/5xx errors). Pure (bytes in, events out), so it is fed from strings in arbitrary
// splits by the unit tests. HTTP framing and de-chunking are llhttp's.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sidelock::cli {

struct AcquireRequest {
  std::string name;
  std::optional<int64_t> ttl_ms;
  std::optional<int64_t> wait_ms;
  std::optional<int64_t> max_hold_ms;
  std::string token;  // bearer token ($SIDELOCK_AUTH_TOKEN); "" sends none
  std::optional<std::string> health_url;  // the sidecar validates it (loopback http only)
  int64_t health_grace_ms = 0;            // with health_url: health.grace_ms
};

/// The full HTTP/1.1 request text (path percent-encoded, JSON body).
std::string buildAcquireRequest(const AcquireRequest& request);

struct CampaignRequest {
  std::string name;  // the election
  std::string candidate;
  std::optional<std::string> value;
  std::optional<int64_t> ttl_ms;
  std::string token;  // bearer token ($SIDELOCK_AUTH_TOKEN); "" sends none
  /// --health: the leader resigns when the app's endpoint fails (as AcquireRequest's).
  std::optional<std::string> health_url;
  int64_t health_grace_ms = 0;
};

/// The full HTTP/1.1 request text of a campaign (path percent-encoded, JSON body).
std::string buildCampaignRequest(const CampaignRequest& request);

struct StreamEvent {
  // kElected, kSteppingDown and kResigned are a campaign's (its `lost` and `renewed` are parsed
  // as a lock's).
  enum class Type {
    kAcquired,
    kRenewed,
    kLost,
    kCapped,
    kElected,
    kSteppingDown,
    kResigned,
    kUnknown
  };
  Type type = Type::kUnknown;
  std::string event;  // the "event" field as sent
  std::string name;
  std::string owner;
  uint64_t token = 0;   // the fencing token: a lock's `token`, an election's `term`
  int64_t ttl_ms = -1;  // -1 when absent (a renewal then restores the granted TTL)
  std::string reason;   // lost
  bool cap_reached = false;  // lost: the lease ran out at its max hold, after `capped`
  // stepping_down: the sidecar resigns (a campaign's resign_in_ms) or releases (a stream hold's
  // release_in_ms) then at the latest.
  int64_t resign_in_ms = -1;
};

/// One NDJSON line -> event. `acquired` must carry owner and token, `elected` owner and term;
/// unknown event names are returned as kUnknown (newer sidecars may add events) rather than
/// rejected.
StatusOr<StreamEvent> parseStreamEvent(std::string_view line);

/// A refusal body: {"error":code,"message":...,"retry_after_ms":N}. Lenient: a body that is
/// not JSON leaves `error` empty and puts the text (truncated) into `message`.
struct ErrorBody {
  std::string error;
  std::string message;
  int64_t retry_after_ms = -1;
};
ErrorBody parseErrorBody(std::string_view body);

class AcquireResponseParser {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxBodyBytes = 64 * 1024;  // a refusal body / one stream line

  /// `max_body_bytes` bounds a non-stream body (a refusal; the lease list of `sidelock locks`).
  explicit AcquireResponseParser(size_t max_body_bytes = kMaxBodyBytes);
  ~AcquireResponseParser();
  AcquireResponseParser(const AcquireResponseParser&) = delete;
  AcquireResponseParser& operator=(const AcquireResponseParser&) = delete;

  /// Feeds received bytes. Errors (bad HTTP, bad JSON line, limits) are final.
  Status feed(std::string_view data);
  /// The peer closed the connection. Error if the response was cut short.
  Status finish();

  bool headComplete() const { return head_complete_; }
  int status() const { return status_; }
  /// 200 with an application/x-ndjson body: events follow. Valid once headComplete().
  bool isStream() const { return is_stream_; }
  /// The whole response (a refusal, or the end of a stream) has arrived.
  bool messageComplete() const { return message_complete_; }
  /// The body of a non-stream response.
  const std::string& body() const { return body_; }

  /// Next complete stream event, in order.
  std::optional<StreamEvent> nextEvent();

 private:
  struct Impl;
  friend struct Impl;
  Status onBody(std::string_view data);

  size_t max_body_bytes_;
  std::unique_ptr<Impl> impl_;
  bool head_complete_ = false;
  bool is_stream_ = false;
  bool message_complete_ = false;
  int status_ = 0;
  size_t header_bytes_ = 0;
  std::string content_type_;
  std::string header_field_;
  bool in_content_type_ = false;
  std::string body_;
  std::string line_;
  std::deque<StreamEvent> events_;
  Status error_;
};

}  // namespace sidelock::cli
