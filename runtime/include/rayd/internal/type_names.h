#pragma once
// Readable C++ type names, for error reports that cross process boundaries: a worker that
// catches a user exception stores DemangledTypeName(e) as the error's type, and the caller's
// RemoteError::remote_type() returns it ("std::out_of_range", "mylib::ParseError").

#include <exception>
#include <string>
#include <typeinfo>

namespace rayd::internal {

// The demangled name of `type` ("std::vector<int, std::allocator<int> >"); the mangled name
// when demangling fails.
std::string DemangledName(const std::type_info& type);

// The demangled name of the dynamic type of `e`.
std::string DemangledTypeName(const std::exception& e);

}  // namespace rayd::internal
