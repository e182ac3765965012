// The resource the chaos workload protects: registers in a separate redis-server (never faulted),
// each a counter that clients increment by read-modify-write under the lock. A fenced access
// carries the grant's token and is refused when a higher token was already seen for the key; the
// unfenced control reads and writes blindly, as a resource that ignores tokens would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/redis_link.h"

namespace sidelock::testing::chaos {

class FencedRegister {
 public:
  explicit FencedRegister(int port) : link_(port) {}

  struct Access {
    bool accepted = false;
    int64_t value = 0;  // the counter read or written, or the highest token seen (rejections)
  };
  /// Reads the counter. Fenced reads also raise the key's highest token: a holder with a later
  /// token that read first makes every write of an earlier holder fail, which a check on writes
  /// alone would not (the earlier write could land between the later read and write).
  Access read(const std::string& key, uint64_t token, bool fenced);
  /// Writes the counter and counts the write as accepted (and records its token), unless fenced
  /// and a higher token was seen.
  Access write(const std::string& key, uint64_t token, int64_t value, bool fenced);

  /// Accepted writes so far (each meant to add one to the counter).
  int64_t acceptedWrites(const std::string& key);
  /// Violations of the register's record: lost updates (counter != accepted writes) and, for
  /// fenced keys, accepted tokens that went down.
  std::vector<std::string> check(const std::string& key, bool fenced);

 private:
  RedisLink link_;
};

}  // namespace sidelock::testing::chaos
