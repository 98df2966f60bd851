// RuntimeEnv's out-of-line parts and the one place its fields become worker environment.

#include "rayd/api/runtime_env.h"

namespace rayd {

void RuntimeEnv::SetJsonStr(const std::string& name, const std::string& json_str) {
  nlohmann::json value = nlohmann::json::parse(json_str, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    throw RuntimeEnvError("runtime env field '" + name + "': not JSON: " + json_str);
  }
  fields_[name] = std::move(value);
}

std::string RuntimeEnv::GetJsonStr(const std::string& name) const {
  if (!Contains(name)) throw RuntimeEnvError("runtime env has no field '" + name + "'");
  return fields_.at(name).dump();
}

RuntimeEnv RuntimeEnv::Deserialize(const std::string& serialized_runtime_env) {
  nlohmann::json value =
      nlohmann::json::parse(serialized_runtime_env, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) {
    throw RuntimeEnvError("a serialized runtime env must be a JSON object, got: " +
                          serialized_runtime_env);
  }
  RuntimeEnv env;
  env.fields_ = std::move(value);
  return env;
}

namespace internal {

std::map<std::string, std::string> EnvVarsOf(const RuntimeEnv& env) {
  std::map<std::string, std::string> vars;
  const nlohmann::json all = nlohmann::json::parse(env.Serialize());
  for (const auto& [field, value] : all.items()) {
    if (field != "env_vars") {
      throw RuntimeEnvError("runtime env field '" + field +
                            "' is not supported by rayd (it supports env_vars only)");
    }
    if (!value.is_object()) {
      throw RuntimeEnvError("runtime env field 'env_vars' must be an object of strings, got " +
                            value.dump());
    }
    for (const auto& [name, text] : value.items()) {
      if (!text.is_string()) {
        throw RuntimeEnvError("runtime env env_vars['" + name + "'] must be a string, got " +
                              text.dump());
      }
      if (name.empty() || name.find('=') != std::string::npos) {
        throw RuntimeEnvError("runtime env env_vars has a bad variable name '" + name + "'");
      }
      vars[name] = text.get<std::string>();
    }
  }
  return vars;
}

}  // namespace internal
}  // namespace rayd
