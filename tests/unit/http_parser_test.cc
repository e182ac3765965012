// RequestParser alone: bytes in, requests out, no loop or socket (what the fuzzer drives).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "http/http_error.h"
#include "http/request_parser.h"
#include "http/response_writer.h"

namespace sidelock::http {
namespace {

struct Collected {
  std::vector<ParsedRequest> requests;
  bool error = false;
  bool upgrade = false;
  ParseError last_error;
};

// Feeds `input` in pieces of `step` bytes, taking every complete request.
Collected parseAll(std::string_view input, size_t step = 0, ParserLimits limits = {}) {
  RequestParser parser(limits, nullptr);
  Collected out;
  if (step == 0) step = input.size();
  size_t pos = 0;
  while (pos < input.size() && !out.error && !out.upgrade) {
    std::string_view piece = input.substr(pos, step);
    while (!piece.empty()) {
      RequestParser::FeedResult r = parser.feed(piece.data(), piece.size());
      piece.remove_prefix(r.consumed);
      if (r.error) {
        out.error = true;
        out.last_error = parser.error();
        break;
      }
      if (r.request_ready) out.requests.push_back(parser.takeRequest());
      if (r.upgrade) {
        out.upgrade = true;
        break;
      }
      if (!r.request_ready) break;
    }
    pos += step;
  }
  return out;
}

TEST(RequestParser, PipelinedRequestsComeOutOneAtATimeInOrder) {
  const std::string input =
      "GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /b%20c HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-Y: Z\r\n\r\nhello"
      "HEAD /c HTTP/1.0\r\n\r\n";
  for (size_t step : {size_t{0}, size_t{1}, size_t{7}}) {
    Collected c = parseAll(input, step);
    ASSERT_FALSE(c.error) << "step " << step;
    ASSERT_EQ(c.requests.size(), 3u) << "step " << step;
    EXPECT_EQ(c.requests[0].request.method, "GET");
    EXPECT_EQ(c.requests[0].request.path, "/a");
    EXPECT_EQ(c.requests[0].request.query, "x=1");
    EXPECT_EQ(c.requests[1].request.path, "/b c");
    EXPECT_EQ(c.requests[1].request.raw_path, "/b%20c");
    EXPECT_EQ(c.requests[1].request.body, "hello");
    EXPECT_EQ(c.requests[1].request.header("x-y"), "Z");
    EXPECT_TRUE(c.requests[1].keep_alive);
    EXPECT_TRUE(c.requests[2].head_method);
    EXPECT_TRUE(c.requests[2].http10);
    EXPECT_FALSE(c.requests[2].keep_alive);
  }
}

TEST(RequestParser, LimitsGive431And413) {
  ParserLimits small;
  small.max_header_bytes = 64;
  small.max_body_bytes = 4;
  Collected head = parseAll("GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n", 3, small);
  ASSERT_TRUE(head.error);
  EXPECT_EQ(head.last_error.status, 431);
  Collected declared =
      parseAll("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", 0, small);
  ASSERT_TRUE(declared.error);
  EXPECT_EQ(declared.last_error.status, 413);
  Collected chunked = parseAll(
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
      0, small);
  ASSERT_TRUE(chunked.error);
  EXPECT_EQ(chunked.last_error.status, 413);
}

TEST(RequestParser, MalformedInputIsA400WithAReason) {
  Collected c = parseAll("GET / HTTP/1.1\r\nBad Header\r\n\r\n");
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.last_error.status, 400);
  EXPECT_NE(c.last_error.message.find("malformed request"), std::string::npos);
  Collected relative = parseAll("GET a/b HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(relative.error);
  EXPECT_EQ(relative.last_error.status, 400);
}

TEST(RequestParser, RecycledStorageDoesNotLeakIntoTheNextRequest) {
  RequestParser parser({}, nullptr);
  std::string first = "POST /one HTTP/1.1\r\nHost: h\r\nA: 1\r\nContent-Length: 3\r\n\r\nabc";
  auto r = parser.feed(first.data(), first.size());
  ASSERT_TRUE(r.request_ready);
  ParsedRequest one = parser.takeRequest();
  parser.recycle(std::move(one.request));
  std::string second = "GET /two HTTP/1.1\r\nHost: h\r\n\r\n";
  r = parser.feed(second.data(), second.size());
  ASSERT_TRUE(r.request_ready);
  ParsedRequest two = parser.takeRequest();
  EXPECT_EQ(two.request.path, "/two");
  EXPECT_TRUE(two.request.body.empty());
  ASSERT_EQ(two.request.headers.size(), 1u);
  EXPECT_EQ(two.request.header("a"), "");
}

// Issue 11, hostile input: each framing problem is an error with its own status, code and
// reason, whether the bytes come at once or one by one.
TEST(RequestParser, HostileFramingIsRefusedWithItsOwnStatus) {
  using namespace std::string_literals;
  struct Case {
    std::string input;
    int status;
    std::string_view code;
    std::string message_part;
  };
  const std::string kHost = "Host: h\r\n";
  std::string many = "GET / HTTP/1.1\r\n" + kHost;
  for (int i = 0; i < 100; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  const std::vector<Case> cases = {
      {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, kBadRequest, "HPE_INVALID_METHOD"},
      {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, kHttpVersionNotSupported, "HTTP/2"},
      {"POST / HTTP/1.1\r\n" + kHost + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
       400, kBadRequest, "Content-Length can't be present with Transfer-Encoding"},
      {"POST / HTTP/1.1\r\n" + kHost + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400,
       kBadRequest, "Duplicate Content-Length"},
      {"POST / HTTP/1.1\r\n" + kHost + "Content-Length: 2, 2\r\n\r\n{}", 400, kBadRequest,
       "Content-Length"},
      {"POST / HTTP/1.1\r\n" + kHost + "Content-Length: 99999999999999999999\r\n\r\n", 400,
       kBadRequest, "Content-Length overflow"},
      {"POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400, kBadRequest,
       "chunk size"},
      {"POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\n",
       400, kBadRequest, "Chunk size overflow"},
      {"POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n-1\r\n", 400, kBadRequest,
       "chunk size"},
      {"GET / HTTP/1.1\r\n" + kHost + "X-A: a\0b\r\n\r\n"s, 400, kBadRequest, "header value"},
      {"GET / HTTP/1.1\r\n" + kHost + "X-A: a\rb\r\n\r\n", 400, kBadRequest, "LF"},
      {"GET / HTTP/1.1\r\n" + kHost + "X-A: a\nb\r\n\r\n", 400, kBadRequest, "header value"},
      {"GET / HTTP/1.1\r\n" + kHost + "X-\0A: a\r\n\r\n"s, 400, kBadRequest, "header"},
      {"GET / HTTP/1.1\r\n" + kHost + "X-A : a\r\n\r\n", 400, kBadRequest, "colon"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", 414, kUriTooLong, "8192"},
      {many + "\r\n", 431, kHeadersTooLarge, "more than 100 header lines"},
      {"GET / HTTP/1.1\r\n\r\n", 400, kBadRequest, "need a Host"},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, kBadRequest, "more than one Host"},
      {"GET / HTTP/1.1\r\nHost: localhost:abc\r\n\r\n", 400, kBadRequest, "host[:port]"},
      {"GET / HTTP/1.1\r\nHost: evil@localhost\r\n\r\n", 400, kBadRequest, "host[:port]"},
      {"GET http://localhost:7x/ HTTP/1.1\r\n" + kHost + "\r\n", 400, kBadRequest,
       "authority is not host[:port]"},
      {"POST / HTTP/1.1\r\n" + kHost +
           "Content-Type: text/xml\r\nContent-Type: application/json\r\n\r\n",
       400, kBadRequest, "more than one Content-Type"},
      {"POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: gzip, chunked\r\n\r\n", 501,
       kNotImplemented, "\"gzip\""},
      {"POST / HTTP/1.1\r\n" + kHost +
           "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
       501, kNotImplemented, "\"gzip\""},
      {"POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: gzip\r\n\r\n", 400, kBadRequest,
       "end with chunked"},
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, kBadRequest, "HTTP/1.0"},
      {"GET /\r\n\r\n", 400, kBadRequest, "HTTP/0.9"},
      {"GET /healthz\r\n", 400, kBadRequest, "HTTP/0.9"},
      {"GET /healthz\n", 400, kBadRequest, "HTTP/0.9"},
  };
  for (const Case& tc : cases) {
    for (size_t step : {size_t{0}, size_t{1}}) {
      Collected c = parseAll(tc.input, step);
      ASSERT_TRUE(c.error) << tc.input.substr(0, 80) << " step " << step;
      EXPECT_TRUE(c.requests.empty()) << tc.input.substr(0, 80);
      EXPECT_EQ(c.last_error.status, tc.status) << tc.input.substr(0, 80) << " step " << step;
      EXPECT_EQ(c.last_error.code, tc.code) << tc.input.substr(0, 80);
      EXPECT_NE(c.last_error.message.find(tc.message_part), std::string::npos)
          << tc.input.substr(0, 80) << " -> " << c.last_error.message;
    }
  }
}

TEST(RequestParser, WhatStaysAcceptedAtTheEdges) {
  // A chunk extension, exactly 100 headers, HTTP/1.0 without Host, a list Transfer-Encoding of
  // just chunked, and obs-fold (which llhttp turns into spaces: no CR or LF reaches a value).
  std::string hundred = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 1; i < 100; ++i) hundred += "X-" + std::to_string(i) + ": v\r\n";
  for (const std::string& input : {
           std::string("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "2;name=value\r\n{}\r\n0\r\n\r\n"),
           hundred + "\r\n",
           std::string("GET / HTTP/1.0\r\n\r\n"),
           std::string("GET /" + std::string(8000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n"),
           // Whitespace around a value is not part of it (RFC 9112 5): the Host check reads
           // "localhost:7411"; an IPv6 zone (RFC 6874); an absolute-form target with an empty
           // path before its query (RFC 3986 3.2).
           std::string("GET / HTTP/1.1\r\nHost: localhost:7411 \t\r\n\r\n"),
           std::string("GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]:7411\r\n\r\n"),
           std::string("GET http://localhost:7411?x=1 HTTP/1.1\r\nHost: h\r\n\r\n"),
       }) {
    for (size_t step : {size_t{0}, size_t{1}}) {
      Collected c = parseAll(input, step);
      EXPECT_FALSE(c.error) << input.substr(0, 80) << " -> " << c.last_error.message;
      ASSERT_EQ(c.requests.size(), 1u) << input.substr(0, 80);
      for (const auto& [name, value] : c.requests[0].request.headers) {
        EXPECT_EQ(value.find_first_of("\r\n"), std::string::npos) << name;
      }
      if (input.find("X-A:") != std::string::npos) {
        EXPECT_EQ(c.requests[0].request.header("x-a"), "a b") << "obs-fold becomes a space";
      }
      if (input.find("7411 ") != std::string::npos) {
        EXPECT_EQ(c.requests[0].request.header("host"), "localhost:7411");
      }
      if (input.find("?x=1") != std::string::npos) {
        EXPECT_EQ(c.requests[0].request.path, "/");
        EXPECT_EQ(c.requests[0].request.query, "x=1");
        EXPECT_EQ(c.requests[0].request.header("host"), "localhost:7411");
      }
    }
  }
}

TEST(ResponseWriter, FramesResponsesAndChunks) {
  std::string out;
  ResponseFraming keep_alive;
  appendResponse(out, keep_alive, 200, "text/plain", "ok",
                 {{"X-A", "b"}, {"Content-Length", "99"}, {"Connection", "close"}});
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nServer: sidelock\r\nContent-Type: text/plain\r\n"
            "Content-Length: 2\r\nX-A: b\r\n\r\nok");
  EXPECT_TRUE(asksToClose({{"connection", "Close"}}));
  out.clear();
  ResponseFraming head{.close = true, .http10 = false, .head_method = true};
  appendResponse(out, head, 404, "", "body", {});
  EXPECT_EQ(out,
            "HTTP/1.1 404 Not Found\r\nServer: sidelock\r\nConnection: close\r\n"
            "Content-Length: 4\r\n\r\n");
  out.clear();
  appendResponse(out, keep_alive, 204, "", "ignored", {});  // Dapr's /v1.0/healthz
  EXPECT_EQ(out, "HTTP/1.1 204 No Content\r\nServer: sidelock\r\n\r\n")
      << "204 has no body and no Content-Length";
  out.clear();
  ResponseFraming chunked;
  appendStreamHead(out, chunked, 200, "application/x-ndjson");
  appendChunk(out, chunked, "");
  appendChunk(out, chunked, "0123456789abcdef!");
  appendStreamEnd(out, chunked);
  EXPECT_NE(out.find("Transfer-Encoding: chunked\r\n\r\n11\r\n0123456789abcdef!\r\n0\r\n\r\n"),
            std::string::npos);
}

}  // namespace
}  // namespace sidelock::http
