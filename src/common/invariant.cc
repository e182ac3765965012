#include "common/invariant.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "common/log.h"

namespace sidelock {
namespace {

uint64_t violations = 0;  // touched only from the one event-loop thread

}  // namespace

uint64_t internalErrorCount() { return violations; }

namespace detail {

bool invariantFailed(const char* event, const char* condition, const char* file, int line) {
  ++violations;
  // Events are literals at a handful of call sites: the set stays tiny.
  static std::set<std::string> logged;
  const bool first = logged.insert(event).second;
#ifndef NDEBUG
  (void)first;
  std::fprintf(stderr, "sidelock: invariant %s failed: %s (%s:%d)\n", event, condition, file, line);
  std::abort();
#else
  if (first) {
    SL_LOG(kError, "internal.invariant_failed", {"invariant", event}, {"condition", condition},
           {"at", std::string(file) + ":" + std::to_string(line)},
           {"note", "a bug in sidelock: please report it; later failures of this invariant are "
                    "counted in sidelock_internal_errors_total, not logged"});
  }
#endif
  return false;
}

}  // namespace detail
}  // namespace sidelock
