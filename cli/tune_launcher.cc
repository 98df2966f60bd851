// `rayd tune` and `rayd train` live in librayd_cli_tune.so (see tune.cc): loaded here, on
// demand, from beside this binary (build tree: build/cli/) or from <prefix>/lib/rayd/.

#include <dlfcn.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "commands.h"

namespace rayd::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPlugin = "librayd_cli_tune.so";

// Resolves `symbol` in the plugin, or prints why it cannot and returns null.
void* PluginSymbol(const char* command, const char* symbol) {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::string tried;
  for (const fs::path& candidate :
       {exe.parent_path() / kPlugin, exe.parent_path().parent_path() / "lib" / "rayd" / kPlugin}) {
    if (!fs::exists(candidate, ec)) {
      tried += (tried.empty() ? "" : ", ") + candidate.string();
      continue;
    }
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      std::cerr << "rayd " << command << ": cannot load " << candidate.string() << ": "
                << dlerror() << "\n";
      return nullptr;
    }
    void* entry = dlsym(handle, symbol);
    if (entry == nullptr) std::cerr << "rayd " << command << ": " << dlerror() << "\n";
    return entry;
  }
  std::cerr << "rayd " << command << ": " << kPlugin << " is missing (looked at " << tried
            << "); rebuild or reinstall rayd\n";
  return nullptr;
}

}  // namespace

int RunTune(const TuneArgs& args) {
  auto* run = reinterpret_cast<int (*)(const TuneArgs*)>(PluginSymbol("tune", "rayd_cli_tune"));
  return run == nullptr ? 1 : run(&args);
}

int RunTrain(const TrainArgs& args) {
  auto* run =
      reinterpret_cast<int (*)(const TrainArgs*)>(PluginSymbol("train", "rayd_cli_train"));
  return run == nullptr ? 1 : run(&args);
}

}  // namespace rayd::cli
