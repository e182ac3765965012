#include "backend/backend.h"

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

}  // namespace sidelock::backend
