// The one shape of every error response: {"error":"<code>","message":"..."} (issue 2, HTTP API
// v1). Shared by the server (parser limits), the router (404/405) and the API routes.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/http_types.h"

namespace sidelock::http {

/// Error codes the HTTP layer itself produces.
inline constexpr std::string_view kBadRequest = "bad_request";
inline constexpr std::string_view kNotFound = "not_found";
inline constexpr std::string_view kMethodNotAllowed = "method_not_allowed";
inline constexpr std::string_view kPayloadTooLarge = "payload_too_large";
inline constexpr std::string_view kHeadersTooLarge = "headers_too_large";
inline constexpr std::string_view kRequestTimeout = "request_timeout";
inline constexpr std::string_view kUriTooLong = "uri_too_long";
inline constexpr std::string_view kNotImplemented = "not_implemented";
inline constexpr std::string_view kHttpVersionNotSupported = "http_version_not_supported";
inline constexpr std::string_view kExpectationFailed = "expectation_failed";
inline constexpr std::string_view kTooManyConnections = "too_many_connections";

/// `{"error":code,"message":message}` (nlohmann::json; invalid UTF-8 is replaced, never thrown).
std::string errorBody(std::string_view code, std::string_view message);

/// Sends an error response with the JSON body above and Content-Type application/json.
void sendError(Responder& responder, int status, std::string_view code, std::string_view message,
               std::vector<std::pair<std::string, std::string>> extra_headers = {});

/// "OK", "Not Found", ... ("Unknown" for codes we never send).
std::string_view reasonPhrase(int status);

}  // namespace sidelock::http
