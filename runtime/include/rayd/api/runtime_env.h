#pragma once
// RuntimeEnv: the environment a job's, a task's or an actor's workers run in (Ray's
// ray::RuntimeEnv). Fields are JSON values by name; rayd acts on one of them:
//
//   rayd::RuntimeEnv env;
//   env.Set("env_vars", std::map<std::string, std::string>{{"MODE", "fast"}});
//   rayd::Task(Work).SetRuntimeEnv(env).Remote();      // Work sees getenv("MODE") == "fast"
//
//   env_vars   {name: value} of strings: set in the worker's environment
//
// A task's or actor's env_vars go on top of the job's (RaydConfig::runtime_env) and of the
// submitting task's, name by name. Any other field (Ray's pip, conda, working_dir, ...) is kept
// and readable but refused at submission with RuntimeEnvError naming it, as is an env_vars that
// is not an object of strings: rayd ships no package manager, and a silently ignored
// dependency would fail later and far away.
//
// A plain value: copy it freely. Not thread-safe for concurrent writes.

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "rayd/api/errors.h"

// Ray's ray/api/runtime_env.h declares this alias at global scope, and Ray programs write their
// fields' to_json / from_json with it; kept so that they port by renaming.
using json = nlohmann::json;

namespace rayd {

class RuntimeEnv {
 public:
  // Sets field `name` to `value` (anything nlohmann::json can hold). Throws RuntimeEnvError
  // when the value does not convert.
  template <typename T>
  void Set(const std::string& name, const T& value) {
    try {
      fields_[name] = nlohmann::json(value);
    } catch (const std::exception& e) {
      throw RuntimeEnvError("runtime env field '" + name + "' cannot be set: " + e.what());
    }
  }
  // Field `name` as a T. Throws RuntimeEnvError when it is absent or does not convert.
  template <typename T>
  T Get(const std::string& name) const {
    if (!Contains(name)) throw RuntimeEnvError("runtime env has no field '" + name + "'");
    try {
      return fields_.at(name).get<T>();
    } catch (const std::exception& e) {
      throw RuntimeEnvError("runtime env field '" + name + "' cannot be read: " + e.what());
    }
  }
  // Sets a field from JSON text; throws RuntimeEnvError naming the field for bad JSON.
  void SetJsonStr(const std::string& name, const std::string& json_str);
  // The field as JSON text; throws RuntimeEnvError when it is absent.
  std::string GetJsonStr(const std::string& name) const;
  bool Contains(const std::string& name) const { return fields_.contains(name); }
  // True when the field was there.
  bool Remove(const std::string& name) { return fields_.erase(name) > 0; }
  bool Empty() const { return fields_.empty(); }
  // The whole environment as JSON text, and back (RuntimeEnvError for text that is not a JSON
  // object).
  std::string Serialize() const { return fields_.dump(); }
  static RuntimeEnv Deserialize(const std::string& serialized_runtime_env);

 private:
  nlohmann::json fields_ = nlohmann::json::object();
};

namespace internal {
// The environment variables `env` asks for; throws RuntimeEnvError for a field rayd does not
// support or an env_vars that is not an object of strings.
std::map<std::string, std::string> EnvVarsOf(const RuntimeEnv& env);
}  // namespace internal

}  // namespace rayd
