#include "http/http_error.h"

#include <nlohmann/json.hpp>

namespace sidelock::http {

std::string errorBody(std::string_view code, std::string_view message) {
  nlohmann::json j;
  j["error"] = code;
  j["message"] = message;
  // Messages may quote client bytes (a path); replacing bad UTF-8 keeps dump() from throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void sendError(Responder& responder, int status, std::string_view code, std::string_view message,
               std::vector<std::pair<std::string, std::string>> extra_headers) {
  responder.send(status, "application/json", errorBody(code, message), std::move(extra_headers));
}

std::string_view reasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 421:
      return "Misdirected Request";
    case 422:
      return "Unprocessable Entity";
    case 423:
      return "Locked";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace sidelock::http
