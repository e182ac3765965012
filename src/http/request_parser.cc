#include "http/request_parser.h"

#include <algorithm>

#include "http/http_error.h"
#include "http/router.h"

namespace sidelock::http {
namespace {

// Request line framing ("GET  HTTP/1.1\r\n") and per-header ": " + CRLF, counted toward
// max_header_bytes on top of the url, names and values llhttp hands us.
constexpr size_t kRequestLineOverhead = 16;
constexpr size_t kHeaderOverhead = 4;
// Room for a typical client's headers (Host, Content-Type, Content-Length, User-Agent, Accept...)
// in one allocation; more only grow the vector.
constexpr size_t kExpectedHeaders = 8;

RequestParser* parserOf(llhttp_t* p) { return static_cast<RequestParser*>(p->data); }

}  // namespace

const llhttp_settings_t& RequestParser::settings() {
  static const llhttp_settings_t settings = [] {
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_message_begin = [](llhttp_t* p) { return parserOf(p)->onMessageBegin(); };
    s.on_url = [](llhttp_t* p, const char* at, size_t len) { return parserOf(p)->onUrl(at, len); };
    s.on_header_field = [](llhttp_t* p, const char* at, size_t len) {
      return parserOf(p)->onHeaderField(at, len);
    };
    s.on_header_value = [](llhttp_t* p, const char* at, size_t len) {
      return parserOf(p)->onHeaderValue(at, len);
    };
    s.on_header_value_complete = [](llhttp_t* p) { return parserOf(p)->onHeaderValueComplete(); };
    s.on_headers_complete = [](llhttp_t* p) { return parserOf(p)->onHeadersComplete(); };
    s.on_body = [](llhttp_t* p, const char* at, size_t len) {
      return parserOf(p)->onBody(at, len);
    };
    s.on_message_complete = [](llhttp_t* p) { return parserOf(p)->onMessageComplete(); };
    return s;
  }();
  return settings;
}

RequestParser::RequestParser(const ParserLimits& limits, ParserListener* listener)
    : limits_(limits), listener_(listener) {
  llhttp_init(&parser_, HTTP_REQUEST, &settings());
  parser_.data = this;
}

RequestParser::FeedResult RequestParser::feed(const char* data, size_t len) {
  FeedResult result;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  if (err == HPE_OK) {
    result.consumed = len;
    return result;
  }
  if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
    // on_message_complete pauses after each request so it is dispatched outside llhttp.
    const char* pos = llhttp_get_error_pos(&parser_);
    size_t used = pos != nullptr ? static_cast<size_t>(pos - data) : len;
    result.consumed = std::min(used, len);
    if (err == HPE_PAUSED) {
      llhttp_resume(&parser_);
    } else {
      result.upgrade = true;  // protocol upgrades are not supported: no more HTTP here
    }
    result.request_ready = ready_;
    return result;
  }
  result.error = true;
  in_message_ = false;
  if (!failed_by_us_) {
    error_.status = 400;
    error_.code = kBadRequest;
    error_.message = std::string("malformed request: ") + llhttp_errno_name(err) + ": " +
                     llhttp_get_error_reason(&parser_);
  }
  return result;
}

ParsedRequest RequestParser::takeRequest() {
  ready_ = false;
  return std::move(current_);
}

void RequestParser::recycle(Request&& spent) { current_.request = std::move(spent); }

// --- llhttp callbacks ----------------------------------------------------------------------------

int RequestParser::fail(int status, std::string_view code, std::string message) {
  failed_by_us_ = true;
  error_.status = status;
  error_.code = code;
  error_.message = std::move(message);
  return -1;
}

int RequestParser::addHeadBytes(size_t n) {
  head_bytes_ += n;
  if (head_bytes_ > limits_.max_header_bytes) {
    return fail(
        431, kHeadersTooLarge,
        "request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
  }
  return 0;
}

int RequestParser::onMessageBegin() {
  ready_ = false;
  if (listener_ != nullptr) listener_->onRequestBegin();
  current_.request.clear();
  current_.request.headers.reserve(kExpectedHeaders);
  current_.keep_alive = true;
  current_.http10 = false;
  current_.head_method = false;
  url_.clear();
  field_.clear();
  value_.clear();
  head_bytes_ = 0;
  in_message_ = true;
  return addHeadBytes(kRequestLineOverhead);
}

int RequestParser::onUrl(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  url_.append(at, len);
  return 0;
}

int RequestParser::onHeaderField(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  field_.append(at, len);
  return 0;
}

int RequestParser::onHeaderValue(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  value_.append(at, len);
  return 0;
}

int RequestParser::onHeaderValueComplete() {
  if (int rc = addHeadBytes(kHeaderOverhead); rc != 0) return rc;
  for (char& ch : field_) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  current_.request.headers.emplace_back(std::move(field_), std::move(value_));
  field_.clear();
  value_.clear();
  return 0;
}

int RequestParser::onHeadersComplete() {
  Request& r = current_.request;
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
  if ((parser_.flags & F_CONTENT_LENGTH) != 0 && parser_.content_length > limits_.max_body_bytes) {
    return fail(413, kPayloadTooLarge,
                "body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
  }
  // curl sends Expect: 100-continue for larger bodies and would wait a second without an
  // interim answer.
  const bool expect_continue = parser_.http_major == 1 && parser_.http_minor == 1 &&
                               equalsIgnoreCase(r.header("expect"), "100-continue");
  if (listener_ != nullptr) listener_->onRequestHead(r, expect_continue);
  return 0;
}

int RequestParser::onBody(const char* at, size_t len) {
  std::string& body = current_.request.body;
  if (body.size() + len > limits_.max_body_bytes) {
    return fail(413, kPayloadTooLarge,
                "body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
  }
  body.append(at, len);
  return 0;
}

int RequestParser::onMessageComplete() {
  current_.keep_alive = llhttp_should_keep_alive(&parser_) != 0 && !llhttp_get_upgrade(&parser_);
  current_.http10 = parser_.http_major == 1 && parser_.http_minor == 0;
  current_.head_method = parser_.method == HTTP_HEAD;
  in_message_ = false;
  ready_ = true;
  return HPE_PAUSED;
}

}  // namespace sidelock::http
