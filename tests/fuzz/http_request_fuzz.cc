// libFuzzer target: bytes -> RequestParser, as a connection would feed them (pipelined requests,
// reads split anywhere, small and default limits), then each parsed request -> the response
// writer. A crash, a sanitizer report or a broken invariant (a trap) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "http/request_parser.h"
#include "http/response_writer.h"

namespace {

using sidelock::http::ParsedRequest;
using sidelock::http::ParserLimits;
using sidelock::http::RequestParser;

void check(bool invariant) {
  if (!invariant) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks the read size (1..64 bytes, or everything at once), the second the
  // limits: small ones reach the 413/431 paths with short inputs.
  const size_t step = data[0] % 65 == 0 ? size : data[0] % 65;
  ParserLimits limits;
  if (data[1] & 1) {
    limits.max_header_bytes = 64 + data[1];
    limits.max_body_bytes = data[1] / 2u;
  }
  std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
  RequestParser parser(limits, nullptr);
  size_t requests = 0;
  bool done = false;
  for (size_t pos = 0; pos < input.size() && !done; pos += step) {
    std::string_view piece = input.substr(pos, step);
    while (!piece.empty() && !done) {
      RequestParser::FeedResult r = parser.feed(piece.data(), piece.size());
      check(r.consumed <= piece.size());
      piece.remove_prefix(r.consumed);
      if (r.error) {
        const int status = parser.error().status;
        check(status == 400 || status == 413 || status == 414 || status == 417 || status == 431 ||
              status == 501 || status == 505);
        check(!parser.error().message.empty());
        done = true;
        break;
      }
      if (r.request_ready) {
        ParsedRequest parsed = parser.takeRequest();
        ++requests;
        check(parsed.request.body.size() <= limits.max_body_bytes);
        check(!parsed.request.path.empty() && parsed.request.path.front() == '/');
        check(!parsed.request.method.empty());
        std::string out;
        sidelock::http::ResponseFraming framing{!parsed.keep_alive, parsed.http10,
                                                parsed.head_method};
        sidelock::http::appendResponse(out, framing, 200, "text/plain", parsed.request.path,
                                       {{"X-Query", parsed.request.query}});
        check(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
        parser.recycle(std::move(parsed.request));
      }
      if (r.upgrade) done = true;
      if (!r.request_ready) break;
    }
  }
  (void)requests;
  return 0;
}
