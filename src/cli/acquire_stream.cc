#include "cli/acquire_stream.h"

#include <llhttp.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "common/percent_encoding.h"

namespace sidelock::cli {
namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string truncated(std::string_view s, size_t n = 200) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

/// A POST whose answer is an event stream or a JSON refusal.
std::string buildStreamPost(const std::string& path, const json& body, const std::string& token) {
  // Replaced, not thrown on: the body's strings come from the command line (--candidate,
  // --value, --health), which parseRunArgs already refuses when not UTF-8; this is the backstop.
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return "POST " + path +
         " HTTP/1.1\r\n"
         // A loopback name: the sidecar refuses other Host names (DNS rebinding).
         "Host: localhost\r\n" +
         (token.empty() ? std::string() : "Authorization: Bearer " + token + "\r\n") +
         "User-Agent: sidelock-run\r\n"
         "Accept: application/x-ndjson, application/json\r\n"
         "Content-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(text.size()) + "\r\n\r\n" + text;
}

}  // namespace

std::string buildAcquireRequest(const AcquireRequest& request) {
  json body = json::object();
  if (request.ttl_ms) body["ttl_ms"] = *request.ttl_ms;
  if (request.wait_ms) body["wait_ms"] = *request.wait_ms;
  if (request.max_hold_ms) body["max_hold_ms"] = *request.max_hold_ms;
  if (request.health_url) {
    body["health"] = {{"url", *request.health_url}, {"grace_ms", request.health_grace_ms}};
  }
  body["hold"] = "stream";
  return buildStreamPost(
      "/v1/locks/" + percentEncode(request.name, PercentKeep::kPathSegment) + "/acquire", body,
      request.token);
}

std::string buildCampaignRequest(const CampaignRequest& request) {
  json body = json::object();
  body["candidate"] = request.candidate;
  if (request.value) body["value"] = *request.value;
  if (request.ttl_ms) body["ttl_ms"] = *request.ttl_ms;
  if (request.health_url) {
    body["health"] = {{"url", *request.health_url}, {"grace_ms", request.health_grace_ms}};
  }
  return buildStreamPost(
      "/v1/elections/" + percentEncode(request.name, PercentKeep::kPathSegment) + "/campaign", body,
      request.token);
}

StatusOr<StreamEvent> parseStreamEvent(std::string_view line) {
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalidArgument("stream line is not a JSON object: " + truncated(line));
  }
  auto it = j.find("event");
  if (it == j.end() || !it->is_string()) {
    return invalidArgument("stream line has no \"event\": " + truncated(line));
  }
  StreamEvent ev;
  ev.event = it->get<std::string>();
  if (ev.event == "acquired") {
    ev.type = StreamEvent::Type::kAcquired;
  } else if (ev.event == "renewed") {
    ev.type = StreamEvent::Type::kRenewed;
  } else if (ev.event == "lost") {
    ev.type = StreamEvent::Type::kLost;
  } else if (ev.event == "capped") {
    ev.type = StreamEvent::Type::kCapped;
  } else if (ev.event == "elected") {
    ev.type = StreamEvent::Type::kElected;
  } else if (ev.event == "stepping_down") {
    ev.type = StreamEvent::Type::kSteppingDown;
  } else if (ev.event == "resigned") {
    ev.type = StreamEvent::Type::kResigned;
  }
  if (auto f = j.find("name"); f != j.end() && f->is_string()) ev.name = f->get<std::string>();
  if (auto f = j.find("owner"); f != j.end() && f->is_string()) ev.owner = f->get<std::string>();
  if (auto f = j.find("reason"); f != j.end() && f->is_string()) ev.reason = f->get<std::string>();
  if (auto f = j.find("cap_reached"); f != j.end() && f->is_boolean()) {
    ev.cap_reached = f->get<bool>();
  }
  // stepping_down: a campaign's says when the sidecar resigns, a stream hold's when it releases.
  for (const char* field : {"resign_in_ms", "release_in_ms"}) {
    if (auto f = j.find(field); f != j.end()) {
      if (!f->is_number_integer() || f->get<int64_t>() < 0) {
        return invalidArgument(std::string("bad ") + field +
                               " in stream event: " + truncated(line));
      }
      ev.resign_in_ms = f->get<int64_t>();
    }
  }
  if (auto f = j.find("ttl_ms"); f != j.end()) {
    if (!f->is_number_integer() || f->get<int64_t>() < 0) {
      return invalidArgument("bad ttl_ms in stream event: " + truncated(line));
    }
    ev.ttl_ms = f->get<int64_t>();
  }
  // An election's fencing token is its term.
  const char* token_field = j.contains("term") ? "term" : "token";
  if (auto f = j.find(token_field); f != j.end()) {
    if (!f->is_number_unsigned()) {
      return invalidArgument(std::string("bad ") + token_field +
                             " in stream event: " + truncated(line));
    }
    ev.token = f->get<uint64_t>();
  }
  if (ev.type == StreamEvent::Type::kAcquired) {
    if (ev.owner.empty() || j.find("token") == j.end()) {
      return invalidArgument("acquired event without owner/token: " + truncated(line));
    }
  }
  if (ev.type == StreamEvent::Type::kElected) {
    if (ev.owner.empty() || j.find("term") == j.end()) {
      return invalidArgument("elected event without owner/term: " + truncated(line));
    }
  }
  return ev;
}

ErrorBody parseErrorBody(std::string_view body) {
  ErrorBody out;
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    out.message = truncated(body);
    return out;
  }
  if (auto f = j.find("error"); f != j.end() && f->is_string()) out.error = f->get<std::string>();
  if (auto f = j.find("message"); f != j.end() && f->is_string()) {
    out.message = f->get<std::string>();
  }
  if (auto f = j.find("retry_after_ms"); f != j.end() && f->is_number_integer()) {
    out.retry_after_ms = f->get<int64_t>();
  }
  return out;
}

// llhttp calls plain C functions; `data` points back at the parser.
struct AcquireResponseParser::Impl {
  llhttp_t parser;
  llhttp_settings_t settings;

  static AcquireResponseParser* self(llhttp_t* p) {
    return static_cast<AcquireResponseParser*>(p->data);
  }
  static int fail(AcquireResponseParser* s, Status status) {
    s->error_ = std::move(status);
    return HPE_USER;
  }
  static int countHeader(AcquireResponseParser* s, size_t n) {
    s->header_bytes_ += n;
    if (s->header_bytes_ > kMaxHeaderBytes) {
      return fail(s, resourceExhausted("response head larger than 16 KiB"));
    }
    return 0;
  }
  static int onHeaderField(llhttp_t* p, const char* at, size_t n) {
    AcquireResponseParser* s = self(p);
    s->header_field_.append(at, n);
    return countHeader(s, n);
  }
  static int onHeaderFieldComplete(llhttp_t* p) {
    AcquireResponseParser* s = self(p);
    s->in_content_type_ = lower(s->header_field_) == "content-type";
    s->header_field_.clear();
    return 0;
  }
  static int onHeaderValue(llhttp_t* p, const char* at, size_t n) {
    AcquireResponseParser* s = self(p);
    if (s->in_content_type_) s->content_type_.append(at, n);
    return countHeader(s, n);
  }
  static int onStatus(llhttp_t* p, const char*, size_t n) { return countHeader(self(p), n); }
  static int onHeadersComplete(llhttp_t* p) {
    AcquireResponseParser* s = self(p);
    s->head_complete_ = true;
    s->status_ = p->status_code;
    std::string type = lower(s->content_type_);
    s->is_stream_ = s->status_ == 200 && type.rfind("application/x-ndjson", 0) == 0;
    return 0;
  }
  static int onBody(llhttp_t* p, const char* at, size_t n) {
    AcquireResponseParser* s = self(p);
    Status st = s->onBody(std::string_view(at, n));
    return st.isOk() ? 0 : fail(s, std::move(st));
  }
  static int onMessageComplete(llhttp_t* p) {
    AcquireResponseParser* s = self(p);
    s->message_complete_ = true;
    // A last line without '\n' still counts.
    if (s->is_stream_ && !s->line_.empty()) {
      StatusOr<StreamEvent> ev = parseStreamEvent(s->line_);
      s->line_.clear();
      if (!ev.isOk()) return fail(s, ev.status());
      s->events_.push_back(std::move(*ev));
    }
    // Anything after the one response we asked for is not ours to read.
    return HPE_PAUSED;
  }
};

AcquireResponseParser::AcquireResponseParser(size_t max_body_bytes)
    : max_body_bytes_(max_body_bytes), impl_(std::make_unique<Impl>()) {
  llhttp_settings_init(&impl_->settings);
  impl_->settings.on_status = &Impl::onStatus;
  impl_->settings.on_header_field = &Impl::onHeaderField;
  impl_->settings.on_header_field_complete = &Impl::onHeaderFieldComplete;
  impl_->settings.on_header_value = &Impl::onHeaderValue;
  impl_->settings.on_headers_complete = &Impl::onHeadersComplete;
  impl_->settings.on_body = &Impl::onBody;
  impl_->settings.on_message_complete = &Impl::onMessageComplete;
  llhttp_init(&impl_->parser, HTTP_RESPONSE, &impl_->settings);
  impl_->parser.data = this;
}

AcquireResponseParser::~AcquireResponseParser() = default;

Status AcquireResponseParser::onBody(std::string_view data) {
  if (!is_stream_) {
    if (body_.size() + data.size() > max_body_bytes_) {
      return resourceExhausted("response body larger than " + std::to_string(max_body_bytes_) +
                               " bytes");
    }
    body_.append(data);
    return Status::ok();
  }
  while (!data.empty()) {
    size_t nl = data.find('\n');
    std::string_view piece = data.substr(0, nl);
    if (line_.size() + piece.size() > kMaxBodyBytes) {
      return resourceExhausted("stream line longer than 64 KiB");
    }
    line_.append(piece);
    if (nl == std::string_view::npos) break;
    data.remove_prefix(nl + 1);
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (!line_.empty()) {  // blank lines are keep-alives
      StatusOr<StreamEvent> ev = parseStreamEvent(line_);
      if (!ev.isOk()) return ev.status();
      events_.push_back(std::move(*ev));
    }
    line_.clear();
  }
  return Status::ok();
}

Status AcquireResponseParser::feed(std::string_view data) {
  if (!error_.isOk()) return error_;
  if (message_complete_ || data.empty()) return Status::ok();
  llhttp_errno_t err = llhttp_execute(&impl_->parser, data.data(), data.size());
  if (err == HPE_OK || err == HPE_PAUSED) return Status::ok();
  if (err == HPE_USER && !error_.isOk()) return error_;
  error_ =
      invalidArgument(std::string("bad HTTP response from the sidecar: ") + llhttp_errno_name(err) +
                      " (" + llhttp_get_error_reason(&impl_->parser) + ")");
  return error_;
}

Status AcquireResponseParser::finish() {
  if (!error_.isOk()) return error_;
  if (message_complete_) return Status::ok();
  // A response without Content-Length or chunking ends at EOF: llhttp completes it here.
  llhttp_errno_t err = llhttp_finish(&impl_->parser);
  if (err != HPE_OK && err != HPE_PAUSED) {
    if (err == HPE_USER && !error_.isOk()) return error_;
    error_ = unavailable(head_complete_ ? "the sidecar closed the connection mid-response"
                                        : "the sidecar closed the connection before answering");
    return error_;
  }
  if (!message_complete_) {
    error_ = unavailable("the sidecar closed the connection before answering");
  }
  return error_;
}

std::optional<StreamEvent> AcquireResponseParser::nextEvent() {
  if (events_.empty()) return std::nullopt;
  StreamEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

}  // namespace sidelock::cli
