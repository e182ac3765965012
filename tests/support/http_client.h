// A small blocking HTTP/1.1 client for tests (TCP or Unix socket), built on plain POSIX sockets and
// llhttp for response parsing. Supports keep-alive, pipelining (send several, then read several),
// raw bytes (for malformed-input tests) and reading chunked streams event by event.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sidelock::testing {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;                            // de-chunked
  bool keep_alive = true;
};

class HttpClient {
 public:
  /// Connects to "127.0.0.1:port" (tcp) or a Unix socket path (unix). Throws on failure.
  static HttpClient tcp(int port);
  static HttpClient unix(const std::string& path);
  HttpClient(HttpClient&&) noexcept;
  HttpClient& operator=(HttpClient&&) noexcept;
  ~HttpClient();

  /// One request, waits for its response. `body` empty: no Content-Length for GET.
  HttpResponse request(const std::string& method, const std::string& path,
                       const std::string& body = "", int timeout_ms = 10000);
  HttpResponse get(const std::string& path) { return request("GET", path); }
  HttpResponse post(const std::string& path, const std::string& body) {
    return request("POST", path, body);
  }

  /// Sends a request without waiting (pipelining); readResponse() then reads answers in order.
  void sendRequest(const std::string& method, const std::string& path,
                   const std::string& body = "");
  /// Sends raw bytes as-is.
  void sendRaw(const std::string& bytes);
  /// Reads one full response; nullopt if the server closed the connection or timed out first.
  std::optional<HttpResponse> readResponse(int timeout_ms = 10000);

  /// For chunked streams: reads the response head, then each call to readStreamLine() returns
  /// the next newline-terminated line of the body (without '\n'); nullopt at end or on close.
  std::optional<HttpResponse> readStreamHead(int timeout_ms = 10000);
  std::optional<std::string> readStreamLine(int timeout_ms = 10000);

  /// True if the server closed the connection (a read returns EOF) within timeout_ms.
  bool waitForClose(int timeout_ms = 5000);
  void close();
  int fd() const { return fd_; }

 private:
  explicit HttpClient(int fd);
  enum class ReadResult { kData, kTimeout, kClosed };
  /// Waits (until `deadline_ms`, steady clock) for bytes and feeds them to the parser.
  ReadResult readSome(int64_t deadline_ms);
  struct Parser;
  int fd_ = -1;
  std::string stream_buf_;
  Parser* parser_ = nullptr;
};

}  // namespace sidelock::testing
