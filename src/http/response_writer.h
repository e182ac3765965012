// The response writer: formats status lines, headers, bodies and chunks into a connection's
// output buffer. No I/O; the connection decides where the bytes go (straight out, or held
// behind an earlier pipelined response) and when they are written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sidelock::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

/// How a response is framed for the request it answers.
struct ResponseFraming {
  bool close = false;        // Connection: close (the connection ends after this response)
  bool http10 = false;       // the client spoke HTTP/1.0: no chunks, keep-alive must be explicit
  bool head_method = false;  // headers only
};

/// True if the handler asked for Connection: close among its extra headers.
bool asksToClose(const HeaderList& extra_headers);

/// A complete response with Content-Length. Framing headers among `extra_headers` (Connection,
/// Content-Length, Transfer-Encoding) are dropped: we own framing, a handler's copy would
/// contradict ours.
void appendResponse(std::string& out, const ResponseFraming& framing, int status,
                    std::string_view content_type, std::string_view body,
                    const HeaderList& extra_headers);

/// The head of a chunked stream (HTTP/1.0: no chunking, the stream ends with the connection).
void appendStreamHead(std::string& out, const ResponseFraming& framing, int status,
                      std::string_view content_type);
/// One chunk of a stream; nothing for empty data (an empty chunk would end the stream).
void appendChunk(std::string& out, const ResponseFraming& framing, std::string_view data);
/// The last chunk.
void appendStreamEnd(std::string& out, const ResponseFraming& framing);

/// The interim answer to Expect: 100-continue.
inline constexpr std::string_view kContinueResponse = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace sidelock::http
