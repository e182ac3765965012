// The rules of the names clients and the configuration give sidelock: lock (and election) names,
// and election candidates. Here, below both, because the API checks them on every request and
// the configuration checks the elections it runs for its pod (`identity`, `elections[].name`)
// against the very same rules.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sidelock {

/// Lock names: 1..max_bytes of A-Z a-z 0-9 and "-_.:@~", except "." and "..". ('~' is what a
/// Dapr resourceId's '/' becomes: see DaprApi::lockNameOfResource.) Everything else is refused:
/// braces would break the Redis Cluster hash tag, '/' the route, NUL/control bytes/spaces logs
/// and keys, glob characters KEYS-style patterns; "." and ".." are path segments that HTTP
/// clients rewrite (curl, browsers and proxies remove them), so such a name would reach a
/// different lock than the one its caller meant. What is wrong with `name` ("" if nothing).
std::string lockNameProblem(std::string_view name, size_t max_bytes);

/// Election candidates: 1..kMaxCandidateBytes printable ASCII (space included).
inline constexpr size_t kMaxCandidateBytes = 256;
/// A leader's value: up to this many bytes of any text.
inline constexpr size_t kMaxLeaderValueBytes = 4096;
/// What is wrong with a candidate ("" if nothing).
std::string candidateProblem(std::string_view candidate);
/// Lock holders (the "holder" of an acquire: a public label, the sidecar's identity by default):
/// the candidates' rule, 1..kMaxCandidateBytes printable ASCII. What is wrong ("" if nothing).
std::string holderProblem(std::string_view holder);

}  // namespace sidelock
