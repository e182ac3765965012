// One bearer token as the configuration parses it and the HTTP layer checks it: a vocabulary type
// shared by config (which reads token files) and http (which verifies requests), so neither
// layer includes the other.
#pragma once

#include <string>
#include <vector>

namespace sidelock {

struct TokenEntry {
  std::string secret;
  /// Lock-name prefixes this token may use; empty = every lock name.
  std::vector<std::string> prefixes;
  /// Where it came from, for logs and refusals: "auth.tokens_file line 3".
  std::string label;
};

}  // namespace sidelock
