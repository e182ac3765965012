// Percent-encoding (RFC 3986 section 2.1: a byte becomes "%XX", upper-case hex), with the set of
// bytes left as they are named by the caller. One encoder for the gRPC gateway's paths and
// queries (api), the client's request paths (cli), grpc-message trailers (grpc) and the tests.
#pragma once

#include <string>
#include <string_view>

namespace sidelock {

/// Which bytes percentEncode() leaves as they are; every other byte becomes %XX.
enum class PercentKeep {
  /// RFC 3986 unreserved: A-Z a-z 0-9 "-._~" (a query's keys and values, the gateway's paths).
  kUnreserved,
  /// Unreserved plus ':' and '@': legal in a path segment (RFC 3986 pchar) and common in lock
  /// names, so the client's paths stay readable in logs.
  kPathSegment,
  /// gRPC's grpc-message: printable ASCII (0x20..0x7E) except '%'.
  kGrpcMessage,
};

/// `text` percent-encoded, keeping the bytes of `keep`. Text needing no encoding (the usual lock
/// name) is returned after one scan, with no per-byte appends.
std::string percentEncode(std::string_view text, PercentKeep keep);
/// percentEncode() appended to `out` (which keeps its capacity: no allocation when it suffices).
void appendPercentEncoded(std::string& out, std::string_view text, PercentKeep keep);

}  // namespace sidelock
