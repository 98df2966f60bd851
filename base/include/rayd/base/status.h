#pragma once
// Status and Result<T>: how rayd code reports expected failures. A small fixed set of codes;
// the detail goes in the message. The public API converts these to rayd::RaydError subclasses.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rayd {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kResourceExhausted = 4,
  kUnavailable = 5,
  kDeadlineExceeded = 6,
  kCancelled = 7,
  kUnimplemented = 8,
  kInternal = 9,
  kPermissionDenied = 10,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DeadlineExceeded: call to gcs timed out after 1000 ms"
  std::string ToString() const;

  // Prefixes the message with context, keeping the code: "registering node: <message>".
  Status WithContext(std::string_view context) const;

  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace rayd

#define RAYD_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::rayd::Status _rayd_s = (expr);      \
    if (!_rayd_s.ok()) return _rayd_s;    \
  } while (0)

#define RAYD_CONCAT_INNER(a, b) a##b
#define RAYD_CONCAT(a, b) RAYD_CONCAT_INNER(a, b)
#define RAYD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
// RAYD_ASSIGN_OR_RETURN(auto x, FunctionReturningResult());
#define RAYD_ASSIGN_OR_RETURN(lhs, expr) \
  RAYD_ASSIGN_OR_RETURN_IMPL(RAYD_CONCAT(_rayd_r_, __LINE__), lhs, expr)
