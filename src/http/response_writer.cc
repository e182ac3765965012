#include "http/response_writer.h"

#include <charconv>

#include "http/http_error.h"
#include "http/http_types.h"

namespace sidelock::http {
namespace {

void appendNumber(std::string& out, uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, r.ptr);
}

void appendHex(std::string& out, uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value, 16);
  out.append(buf, r.ptr);
}

void appendHead(std::string& out, int status, std::string_view content_type, bool close,
                bool http10) {
  out += "HTTP/1.1 ";
  appendNumber(out, static_cast<uint64_t>(status));
  out += ' ';
  out += reasonPhrase(status);
  out += "\r\nServer: sidelock\r\n";
  if (!content_type.empty()) {
    out += "Content-Type: ";
    out += content_type;
    out += "\r\n";
  }
  if (close) {
    out += "Connection: close\r\n";
  } else if (http10) {
    out += "Connection: keep-alive\r\n";
  }
}

}  // namespace

bool asksToClose(const HeaderList& extra_headers) {
  for (const auto& [name, value] : extra_headers) {
    if (equalsIgnoreCase(name, "connection") && equalsIgnoreCase(value, "close")) return true;
  }
  return false;
}

void appendResponse(std::string& out, const ResponseFraming& framing, int status,
                    std::string_view content_type, std::string_view body,
                    const HeaderList& extra_headers) {
  // 204 No Content has neither a body nor a Content-Length (RFC 9110, sections 8.6 and 15.3.5).
  const bool no_content = status == 204;
  appendHead(out, status, content_type, framing.close, framing.http10);
  if (!no_content) {
    out += "Content-Length: ";
    appendNumber(out, body.size());
    out += "\r\n";
  }
  for (const auto& [name, value] : extra_headers) {
    if (equalsIgnoreCase(name, "connection") || equalsIgnoreCase(name, "content-length") ||
        equalsIgnoreCase(name, "transfer-encoding")) {
      continue;
    }
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += "\r\n";
  if (!framing.head_method && !no_content) out += body;
}

void appendStreamHead(std::string& out, const ResponseFraming& framing, int status,
                      std::string_view content_type) {
  appendHead(out, status, content_type, framing.close, false);
  if (!framing.http10) out += "Transfer-Encoding: chunked\r\n";
  out += "\r\n";
}

void appendChunk(std::string& out, const ResponseFraming& framing, std::string_view data) {
  if (data.empty() || framing.head_method) return;
  if (framing.http10) {
    out += data;
    return;
  }
  appendHex(out, data.size());
  out += "\r\n";
  out += data;
  out += "\r\n";
}

void appendStreamEnd(std::string& out, const ResponseFraming& framing) {
  if (!framing.http10 && !framing.head_method) out += "0\r\n\r\n";
}

}  // namespace sidelock::http
