// The request parser: llhttp callbacks and the limits on what a client may send (request line
// and headers, body), with no I/O, no clock and no connection. Bytes go in through feed(), whole
// requests come out one at a time; a connection drives it from its reads, a fuzzer from a buffer.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "http/http_types.h"

namespace sidelock::http {

struct ParserLimits {
  size_t max_header_bytes = 16 * 1024;  // request line + headers, framing included
  size_t max_body_bytes = 64 * 1024;
  size_t max_uri_bytes = 8 * 1024;  // the request target (414 beyond)
  size_t max_header_count = 100;    // header lines (431 beyond)
};

/// What the connection learns while a request is being received (both optional).
class ParserListener {
 public:
  virtual ~ParserListener() = default;
  /// The first byte of a request arrived (the header timeout starts). The listener may hand
  /// recycled request storage to the parser from here (RequestParser::recycle).
  virtual void onRequestBegin() {}
  /// The request head is complete and within limits; the body (if any) follows.
  virtual void onRequestHead(Request& /*request*/, bool /*expect_continue*/) {}
};

/// A complete request and how it was framed.
struct ParsedRequest {
  Request request;
  bool keep_alive = true;
  bool http10 = false;
  bool head_method = false;  // a response to HEAD carries no body (RFC 9110 9.3.2)
};

/// Why a request was refused (status and code of the JSON error response).
struct ParseError {
  int status = 400;
  std::string_view code;
  std::string message;
};

class RequestParser {
 public:
  /// `listener` may be null and must outlive the parser.
  RequestParser(const ParserLimits& limits, ParserListener* listener);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  struct FeedResult {
    size_t consumed = 0;         // bytes of the input used; feed the rest again later
    bool request_ready = false;  // takeRequest() before feeding more
    bool upgrade = false;        // a protocol upgrade: no more HTTP on this connection
    bool error = false;          // error() says why; feed no more
  };
  /// Parses up to one request out of `data`. Stops right after a complete request (so the
  /// caller dispatches it before parsing the next pipelined one), at the end of the input, or
  /// at the first error.
  FeedResult feed(const char* data, size_t len);

  /// The request completed by the last feed(). Its storage leaves the parser.
  ParsedRequest takeRequest();
  /// Gives back a finished request's storage (strings keep their capacity) for the next one.
  void recycle(Request&& spent);

  /// Set after feed() reported an error.
  const ParseError& error() const { return error_; }
  /// True between the first byte of a request and its end (or an error).
  bool inMessage() const { return in_message_; }
  /// Forgets a partly received request (the connection answered it with a timeout).
  void abandonMessage() { in_message_ = false; }

 private:
  static const llhttp_settings_t& settings();
  int onMessageBegin();
  int onUrl(const char* at, size_t len);
  int onUrlComplete();
  /// An HTTP/0.9-style request line ("GET /path" and end of line, no version) is refused.
  int refuseHttp09();
  int onHeaderField(const char* at, size_t len);
  int onHeaderValue(const char* at, size_t len);
  int onHeaderValueComplete();
  int onHeadersComplete();
  /// Host and Transfer-Encoding rules llhttp leaves to us (RFC 9112 3.2 and 6.1).
  int checkFraming();
  int onBody(const char* at, size_t len);
  int onMessageComplete();
  int addHeadBytes(size_t n);
  int fail(int status, std::string_view code, std::string message);

  ParserLimits limits_;
  ParserListener* listener_;
  llhttp_t parser_{};
  // What only lives while a request is parsed, on the heap so that a connection whose request
  // waits (thousands of queued acquires) does not carry it.
  struct InMessage {
    ParsedRequest parsed;
    std::string url, field, value;
    std::string transfer_encoding;  // every Transfer-Encoding line, joined with ","
  };
  std::unique_ptr<InMessage> msg_;  // null between takeRequest() and the next request
  bool ready_ = false;
  size_t head_bytes_ = 0;
  size_t header_count_ = 0;
  int host_count_ = 0;
  int content_type_count_ = 0;
  // HTTP/0.9 detection: the byte after the URL is the end of the line instead of " HTTP/x.y".
  const char* feed_begin_ = nullptr;  // the buffer being fed
  const char* url_end_ = nullptr;     // just past the last URL byte seen in that buffer, if any
  bool in_message_ = false;
  bool failed_by_us_ = false;
  ParseError error_;
};

}  // namespace sidelock::http
