#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace sidelock {
namespace {

void fillRandom(void* buf, size_t len) {
  auto* p = static_cast<unsigned char*>(buf);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("getrandom");
      abort();
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

std::mt19937_64& prng() {
  static std::mt19937_64 gen = [] {
    uint64_t seed = 0;
    fillRandom(&seed, sizeof(seed));
    return std::mt19937_64(seed);
  }();
  return gen;
}

}  // namespace

std::string randomOwnerId() {
  // One getrandom(2) call per 256 owner ids instead of one per acquire: the bytes come from the
  // same kernel CSPRNG, they are only fetched in bulk (the process is single-threaded and never
  // forks after start-up, so no two owners can share buffered bytes).
  static unsigned char pool[4096];
  static size_t used = sizeof(pool);
  if (used + 16 > sizeof(pool)) {
    fillRandom(pool, sizeof(pool));
    used = 0;
  }
  unsigned char bytes[16];
  memcpy(bytes, pool + used, sizeof(bytes));
  memset(pool + used, 0, sizeof(bytes));  // handed out once, then forgotten
  used += sizeof(bytes);
  return lowerHex(bytes, sizeof(bytes));
}

std::string lowerHex(const unsigned char* bytes, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

int64_t jitterBetween(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  return dist(prng());
}

}  // namespace sidelock
