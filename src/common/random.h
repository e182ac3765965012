// Randomness: owner ids from the kernel CSPRNG, and a fast PRNG for backoff jitter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sidelock {

/// 128 bits from getrandom(2), as 32 lowercase hex characters. Aborts if the kernel CSPRNG fails:
/// an owner id that is not secret would let anyone release the lock.
std::string randomOwnerId();

/// `n` bytes as 2n lowercase hex characters: the spelling of every owner id sidelock makes (random
/// ones here, Dapr's derived ones in api/dapr_api.cc).
std::string lowerHex(const unsigned char* bytes, size_t n);

/// Uniform in [lo, hi] (inclusive); for jitter, not for secrets. Seeded from getrandom once.
int64_t jitterBetween(int64_t lo, int64_t hi);

}  // namespace sidelock
