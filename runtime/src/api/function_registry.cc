// The process-wide registry of RAYD_REMOTE functions, and the name handling around it.

#include "rayd/internal/function_registry.h"

#include <spdlog/spdlog.h>

#include <cctype>

#include "rayd/api/errors.h"
#include "rayd/base/logging.h"

namespace rayd::internal {
namespace {

// "  &Counter::Add " -> "Counter::Add".
std::string NormaliseName(std::string_view name) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!name.empty() && (is_space(name.front()) || name.front() == '&')) name.remove_prefix(1);
  while (!name.empty() && is_space(name.back())) name.remove_suffix(1);
  return std::string(name);
}

}  // namespace

FunctionRegistry& FunctionRegistry::Global() {
  // Never destroyed: entries must outlive every static destructor and dlclose'd library that
  // might still look one up.
  static FunctionRegistry* registry = new FunctionRegistry;
  return *registry;
}

void FunctionRegistry::Register(FunctionEntry entry, std::string pointer_key) {
  std::lock_guard<std::mutex> lock(mu_);
  name_by_pointer_.try_emplace(std::move(pointer_key), entry.name);
  if (by_name_.count(entry.name) != 0) {
    spdlog::warn("RAYD_REMOTE: '{}' is registered twice; keeping the first", entry.name);
    return;
  }
  std::string name = entry.name;
  by_name_.emplace(std::move(name), std::make_unique<FunctionEntry>(std::move(entry)));
}

const FunctionEntry* FunctionRegistry::Find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.get();
}

const std::string* FunctionRegistry::NameFor(std::string_view pointer_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = name_by_pointer_.find(pointer_key);
  return it == name_by_pointer_.end() ? nullptr : &it->second;
}

std::vector<std::string> FunctionRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  names.reserve(by_name_.size());
  for (const auto& [name, entry] : by_name_) names.push_back(name);
  return names;
}

std::vector<std::string> SplitRemoteNames(std::string_view names, size_t expected) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= names.size(); ++i) {
    char c = i < names.size() ? names[i] : ',';
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth <= 0) {
      out.push_back(NormaliseName(names.substr(start, i - start)));
      start = i + 1;
    }
  }
  RAYD_CHECK_MSG(out.size() == expected, "RAYD_REMOTE(" + std::string(names) +
                                             "): cannot split into " + std::to_string(expected) +
                                             " names");
  return out;
}

const std::string& RemoteNameForKey(std::string_view pointer_key) {
  const std::string* name = FunctionRegistry::Global().NameFor(pointer_key);
  if (name == nullptr) throw RaydError("function is not registered with RAYD_REMOTE");
  return *name;
}

}  // namespace rayd::internal
