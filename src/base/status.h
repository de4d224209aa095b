// Status and StatusOr<T>: the result of anything the outside world can get wrong
// (input files, user options, a peer rank). Our own bugs use CHECK (base/check.h).
// Thread safety: values; safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "base/check.h"

namespace epserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kIoError,
  kDataLoss,
  kInternal,
  kUnavailable
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(StatusCode::kIoError, std::move(msg)); }
  static Status DataLoss(std::string msg) { return Status(StatusCode::kDataLoss, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "ok" or the message; messages are one line and name the file/field/rank at fault.
  std::string ToString() const { return ok() ? "ok" : message_; }

  // Returns a copy with `prefix: ` prepended to the message (no-op when ok).
  Status WithContext(const std::string& prefix) const {
    if (ok()) return *this;
    return Status(code_, prefix + ": " + message_);
  }
  // WithContext, unless the message already starts with `prefix: ` (a rank's error that has
  // named its rank once is not prefixed again on the way up).
  Status WithContextOnce(const std::string& prefix) const {
    if (ok() || message_.rfind(prefix + ": ", 0) == 0) return *this;
    return WithContext(prefix);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    CHECK(!status_.ok()) << "StatusOr built from an ok Status without a value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CHECK(ok()) << status_.message();
    return *value_;
  }
  const T& value() const& {
    CHECK(ok()) << status_.message();
    return *value_;
  }
  T&& value() && {
    CHECK(ok()) << status_.message();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace epserve

#define EPSERVE_CONCAT_INNER(a, b) a##b
#define EPSERVE_CONCAT(a, b) EPSERVE_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not ok.
#define RETURN_IF_ERROR(expr)       \
  do {                              \
    ::epserve::Status _st = (expr); \
    if (!_st.ok()) return _st;      \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, StatusOrExpr)`: binds the value or returns the Status.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(EPSERVE_CONCAT(_so_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
