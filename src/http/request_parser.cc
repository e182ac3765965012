#include "http/request_parser.h"

#include <algorithm>

#include "http/access_policy.h"
#include "http/http_error.h"
#include "http/path_pattern.h"

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
    s.on_url_complete = [](llhttp_t* p) { return parserOf(p)->onUrlComplete(); };
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
  // Strict parsing, said out loud: every lenient mode stays off. Header values with control
  // bytes, conflicting Content-Length / Transfer-Encoding, a Transfer-Encoding whose last coding
  // is not chunked, bad chunk lengths and malformed versions are all errors, which we answer
  // with 400 and a close (the framing of anything after them is unknown).
  llhttp_set_lenient_headers(&parser_, 0);
  llhttp_set_lenient_chunked_length(&parser_, 0);
  llhttp_set_lenient_keep_alive(&parser_, 0);
  llhttp_set_lenient_transfer_encoding(&parser_, 0);
}

RequestParser::FeedResult RequestParser::feed(const char* data, size_t len) {
  FeedResult result;
  feed_begin_ = data;
  url_end_ = nullptr;
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
  if (!failed_by_us_ && err == HPE_PAUSED_H2_UPGRADE) {
    // "PRI * HTTP/2.0": an HTTP/2 client with prior knowledge. It will not read this answer, but
    // anything speaking HTTP/1.1 that sent it gets a clear one.
    error_.status = 505;
    error_.code = kHttpVersionNotSupported;
    error_.message = "HTTP/2 is not supported: use HTTP/1.1";
  } else if (!failed_by_us_) {
    error_.status = 400;
    error_.code = kBadRequest;
    error_.message = std::string("malformed request: ") + llhttp_errno_name(err) + ": " +
                     llhttp_get_error_reason(&parser_);
  }
  return result;
}

ParsedRequest RequestParser::takeRequest() {
  ready_ = false;
  ParsedRequest taken = std::move(msg_->parsed);
  // The request's storage leaves with it and the parse scratch is freed: a connection whose
  // request waits (a queued acquire, a stream hold) keeps ~450 bytes less. recycle() brings the
  // storage back for a keep-alive connection's next request.
  msg_.reset();
  return taken;
}

void RequestParser::recycle(Request&& spent) {
  if (!msg_) msg_ = std::make_unique<InMessage>();
  msg_->parsed.request = std::move(spent);
}

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
  if (!msg_) msg_ = std::make_unique<InMessage>();
  msg_->parsed.request.clear();
  msg_->parsed.request.headers.reserve(kExpectedHeaders);
  msg_->parsed.keep_alive = true;
  msg_->parsed.http10 = false;
  msg_->parsed.head_method = false;
  msg_->url.clear();
  msg_->field.clear();
  msg_->value.clear();
  head_bytes_ = 0;
  header_count_ = 0;
  host_count_ = 0;
  content_type_count_ = 0;
  msg_->transfer_encoding.clear();
  in_message_ = true;
  return addHeadBytes(kRequestLineOverhead);
}

int RequestParser::onUrl(const char* at, size_t len) {
  if (msg_->url.size() + len > limits_.max_uri_bytes) {
    return fail(414, kUriTooLong,
                "request target exceeds " + std::to_string(limits_.max_uri_bytes) + " bytes");
  }
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  msg_->url.append(at, len);
  url_end_ = at + len;
  return 0;
}

int RequestParser::onUrlComplete() {
  // llhttp calls this on the byte that ends the URL: in this buffer right after the URL's last
  // byte, or (when the URL ended the previous buffer) this buffer's first byte.
  const char* end = url_end_ != nullptr ? url_end_ : feed_begin_;
  if (end != nullptr && (*end == '\r' || *end == '\n')) return refuseHttp09();
  return 0;
}

int RequestParser::refuseHttp09() {
  return fail(400, kBadRequest,
              "HTTP/0.9 request lines are not supported: the request line needs \" HTTP/1.1\"");
}

int RequestParser::onHeaderField(const char* at, size_t len) {
  if (msg_->field.empty() && ++header_count_ > limits_.max_header_count) {
    return fail(431, kHeadersTooLarge,
                "more than " + std::to_string(limits_.max_header_count) + " header lines");
  }
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  msg_->field.append(at, len);
  return 0;
}

int RequestParser::onHeaderValue(const char* at, size_t len) {
  if (int rc = addHeadBytes(len); rc != 0) return rc;
  msg_->value.append(at, len);
  return 0;
}

int RequestParser::onHeaderValueComplete() {
  if (int rc = addHeadBytes(kHeaderOverhead); rc != 0) return rc;
  for (char& ch : msg_->field) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  // llhttp 8 lets two things through that RFC 9112 says a server must refuse (5.1, 5.2):
  // whitespace between a field name and its colon, and obsolete line folding (a value carried
  // on to the next line), which would put CR/LF inside the value.
  if (msg_->field.find_first_of(" \t") != std::string::npos) {
    return fail(400, kBadRequest, "whitespace between a header name and its colon");
  }
  if (msg_->value.find_first_of("\r\n") != std::string::npos) {
    return fail(400, kBadRequest, "header \"" + msg_->field + "\" is folded over several lines");
  }
  // A field value excludes the whitespace around it (RFC 9112 5): llhttp drops the leading
  // part, the trailing part is dropped here ("Host: localhost:7411 " is localhost:7411).
  while (!msg_->value.empty() && (msg_->value.back() == ' ' || msg_->value.back() == '\t')) {
    msg_->value.pop_back();
  }
  if (msg_->field == "host") {
    ++host_count_;
    // RFC 9112 3.2: a Host with an invalid value is answered 400 ("localhost:abc" would
    // otherwise pass the loopback check as "localhost").
    if (!isValidHostField(msg_->value)) return fail(400, kBadRequest, "Host is not host[:port]");
  }
  if (msg_->field == "content-type" && ++content_type_count_ > 1) {
    // Two media types for one body: which one counts would depend on the reader.
    return fail(400, kBadRequest, "more than one Content-Type header");
  }
  if (msg_->field == "transfer-encoding") {
    if (!msg_->transfer_encoding.empty()) msg_->transfer_encoding += ',';
    msg_->transfer_encoding += msg_->value;
  }
  msg_->parsed.request.headers.emplace_back(std::move(msg_->field), std::move(msg_->value));
  msg_->field.clear();
  msg_->value.clear();
  return 0;
}

int RequestParser::checkFraming() {
  const bool http11 = parser_.http_major == 1 && parser_.http_minor == 1;
  if (http11 && host_count_ == 0) return fail(400, kBadRequest, "HTTP/1.1 requests need a Host");
  if (host_count_ > 1) return fail(400, kBadRequest, "more than one Host header");
  if (msg_->transfer_encoding.empty()) return 0;
  if (!http11) {
    return fail(400, kBadRequest, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
  }
  // RFC 9112 6.1: a request whose last coding is not chunked has no knowable length (400, as
  // llhttp would say after this callback); one that also names another coding ("gzip, chunked")
  // llhttp would decode as plain chunked, handing us gzip bytes as the body: we implement no
  // other coding (501).
  std::string_view rest = msg_->transfer_encoding;
  std::string_view unsupported;
  std::string_view last;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view coding = rest.substr(0, comma);
    while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
      coding.remove_prefix(1);
    }
    while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
      coding.remove_suffix(1);
    }
    if (!coding.empty()) {
      last = coding;
      if (unsupported.empty() && !equalsIgnoreCase(coding, "chunked")) unsupported = coding;
    }
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (!equalsIgnoreCase(last, "chunked")) {
    return fail(400, kBadRequest, "Transfer-Encoding must end with chunked");
  }
  if (!unsupported.empty()) {
    return fail(501, kNotImplemented,
                "transfer coding \"" + std::string(unsupported.substr(0, 64)) +
                    "\" is not supported (only chunked)");
  }
  return 0;
}

int RequestParser::onHeadersComplete() {
  if (parser_.http_major == 0) return refuseHttp09();
  if (parser_.http_major != 1) {
    // "GET / HTTP/2.0" is not HTTP/2 (whose clients send the preface) and not HTTP/1.x either.
    return fail(505, kHttpVersionNotSupported,
                "HTTP/" + std::to_string(parser_.http_major) + "." +
                    std::to_string(parser_.http_minor) + " is not supported: use HTTP/1.1");
  }
  if (int rc = checkFraming(); rc != 0) return rc;
  Request& r = msg_->parsed.request;
  r.method = llhttp_method_name(static_cast<llhttp_method_t>(llhttp_get_method(&parser_)));
  std::string_view target = msg_->url;
  std::string rooted;  // an absolute-form target's empty path, made "/" before its query
  // Absolute-form ("http://host/path") is legal from proxies; keep only the path. Its authority
  // is the request's host, whatever Host says (RFC 9112, 3.2.2): the Host checks read it.
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() >= scheme.size() &&
        equalsIgnoreCase(target.substr(0, scheme.size()), scheme)) {
      target.remove_prefix(scheme.size());
      // The authority ends at the path, or at a query or fragment with an empty path
      // (RFC 3986 3.2: "http://localhost:7411?x").
      const size_t slash = target.find_first_of("/?#");
      const std::string_view authority = target.substr(0, slash);
      if (!isValidHostField(authority)) {
        return fail(400, kBadRequest, "the request target's authority is not host[:port]");
      }
      bool had_host = false;
      for (auto& [name, value] : r.headers) {
        if (name == "host") {
          value.assign(authority);
          had_host = true;
        }
      }
      if (!had_host) r.headers.emplace_back("host", std::string(authority));  // HTTP/1.0
      if (slash == std::string_view::npos) {
        target = "/";
      } else if (target[slash] != '/') {
        rooted = "/" + std::string(target.substr(slash));
        target = rooted;
      } else {
        target = target.substr(slash);
      }
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
  // interim answer. Any other expectation cannot be met (RFC 9110, 10.1.1).
  const std::string_view expect = r.header("expect");
  if (!expect.empty() && !equalsIgnoreCase(expect, "100-continue")) {
    return fail(
        417, kExpectationFailed,
        "Expect: " + std::string(expect.substr(0, 64)) + " cannot be met (only 100-continue is)");
  }
  const bool expect_continue = parser_.http_minor == 1 && equalsIgnoreCase(expect, "100-continue");
  if (listener_ != nullptr) listener_->onRequestHead(r, expect_continue);
  return 0;
}

int RequestParser::onBody(const char* at, size_t len) {
  std::string& body = msg_->parsed.request.body;
  if (body.size() + len > limits_.max_body_bytes) {
    return fail(413, kPayloadTooLarge,
                "body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
  }
  body.append(at, len);
  return 0;
}

int RequestParser::onMessageComplete() {
  msg_->parsed.keep_alive =
      llhttp_should_keep_alive(&parser_) != 0 && !llhttp_get_upgrade(&parser_);
  msg_->parsed.http10 = parser_.http_major == 1 && parser_.http_minor == 0;
  msg_->parsed.head_method = parser_.method == HTTP_HEAD;
  in_message_ = false;
  ready_ = true;
  return HPE_PAUSED;
}

}  // namespace sidelock::http
