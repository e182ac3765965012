// What "the next token" means since counters follow Redis's clock
// (src/redis/lua/lib/next_token.lua): one more than the last, or, the first grant in a later second
// of Redis's TIME, that second in microseconds plus one. A test that checks no grant was skipped or
// bumped in between accepts both.
#pragma once

#include <cstdint>

namespace sidelock::testing {

inline bool isNextToken(uint64_t last, uint64_t token) {
  return token == last + 1 || (token > last && token % 1'000'000 == 1);
}

}  // namespace sidelock::testing
