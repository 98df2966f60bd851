#pragma once
// The one conversion from c10d's exceptions to rayd::Status, shared by train's sources.

#include <rayd/base/status.h>

#include <exception>
#include <string_view>

namespace rayd::train {

// "<what>: <the exception's message>" (c10::Error without its C++ backtrace). DeadlineExceeded
// when c10d or Gloo says the operation timed out, Unavailable when a peer's connection broke,
// Internal otherwise.
Status StatusFromC10dException(std::exception_ptr error, std::string_view what);

}  // namespace rayd::train
