// Status / StatusOr: error values for the data path, where we never throw.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace sidelock {

/// Error categories shared by every layer. The API layer maps them to HTTP codes.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from a caller (400)
  kNotFound,          // no such thing (404)
  kFailedPrecondition,
  kResourceExhausted,  // a limit was hit (429 / 413 ...)
  kUnavailable,        // backend cannot answer now (503)
  kDeadlineExceeded,   // backend did not answer in time (503)
  kCancelled,          // the caller went away or the process is stopping
  kInternal,
};

const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "unavailable: redis 127.0.0.1:6379 is down"
  std::string toString() const;

  /// The request went out and no answer came (its budget ended, or the link went down under it):
  /// what it asked for may have been done all the same. Only the layer that sent it knows
  /// (RedisConnection); layers above pass the status on and copies keep it. An acquire that
  /// failed this way may have left a grant nobody was told of (LockService gives it back).
  bool outcomeUnknown() const { return outcome_unknown_; }
  Status& setOutcomeUnknown() {
    outcome_unknown_ = true;
    return *this;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  bool outcome_unknown_ = false;
};

inline Status invalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status deadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status resourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

/// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.isOk() && "StatusOr needs a value or an error");
  }

  bool isOk() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(value_); return *value_; }
  const T& value() const& { assert(value_); return *value_; }
  T&& value() && { assert(value_); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sidelock

#define SIDELOCK_RETURN_IF_ERROR(expr)           \
  do {                                          \
    ::sidelock::Status status_or_ = (expr);     \
    if (!status_or_.isOk()) return status_or_;  \
  } while (0)
