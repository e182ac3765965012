#include "backend/backend.h"

#include <algorithm>

namespace sidelock::backend {

const char* verbName(Verb verb) {
  switch (verb) {
    case Verb::kAcquire:
      return "acquire";
    case Verb::kRelease:
      return "release";
    case Verb::kExtend:
      return "extend";
    case Verb::kInspect:
      return "inspect";
    case Verb::kHandOff:
      return "hand_off";
    case Verb::kForceRelease:
      return "force_release";
    case Verb::kWithdraw:
      return "withdraw";
    case Verb::kProclaim:
      return "proclaim";
  }
  return "unknown";
}

const char* lockKindName(LockKind kind) {
  switch (kind) {
    case LockKind::kMutex:
      return "mutex";
    case LockKind::kSemaphore:
      return "semaphore";
    case LockKind::kShared:
      return "shared";
    case LockKind::kFair:
      return "fair";
    case LockKind::kElection:
      return "election";
  }
  return "unknown";
}

const char* outcomeName(OutcomeCode code) {
  switch (code) {
    case OutcomeCode::kOk:
      return "ok";
    case OutcomeCode::kBusy:
      return "busy";
    case OutcomeCode::kNotOwner:
      return "not_owner";
    case OutcomeCode::kNotHeld:
      return "not_held";
    case OutcomeCode::kLimitMismatch:
      return "limit_mismatch";
  }
  return "unknown";
}

void keepScannedName(ScannedNames* out, std::string name, size_t keep) {
  auto at = std::lower_bound(out->names.begin(), out->names.end(), name);
  if (at != out->names.end() && *at == name) return;
  out->names.insert(at, std::move(name));
  if (out->names.size() > keep) {
    out->names.pop_back();
    out->overflow = true;
  }
}

}  // namespace sidelock::backend
