// Finding rayd_train's torch half (rank_session.h): the hooks it registers when loaded, and
// loading it from beside this library when a rank needs it and nothing linked it.

#include <dlfcn.h>
#include <link.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>

#include "rank_session.h"

namespace rayd::train::internal {
namespace {

namespace fs = std::filesystem;

constexpr char kTorchLibrary[] = "librayd_train_torch.so";

std::atomic<const TorchHooks*> g_hooks{nullptr};

// The directory this library was loaded from (build/train/, or the installed libdir).
fs::path ThisLibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&RegisterTorchHooks), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  fs::path self = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname).parent_path() : self.parent_path();
}

}  // namespace

bool RegisterTorchHooks(const TorchHooks& hooks) {
  static const TorchHooks registered = hooks;  // one torch half per process
  g_hooks.store(&registered);
  return true;
}

const TorchHooks* LoadedTorch() { return g_hooks.load(); }

const TorchHooks& RequireTorch(const std::string& why) {
  if (const TorchHooks* hooks = g_hooks.load()) return *hooks;
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (const TorchHooks* hooks = g_hooks.load()) return *hooks;
  // Beside this library first (the build tree, or a package's libdir), then the loader's path.
  const fs::path beside = ThisLibraryDir() / kTorchLibrary;
  std::error_code ec;
  const std::string path = fs::exists(beside, ec) ? beside.string() : kTorchLibrary;
  // Its static initialiser registers the hooks. Never closed: LibTorch stays for the process.
  const auto started = std::chrono::steady_clock::now();
  void* loaded = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  spdlog::debug("loading {} ({}) took {:.3f} s", path, why,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (loaded == nullptr) {
    const char* error = dlerror();
    throw RaydError(why + ", which needs rayd's LibTorch library, and loading " + path +
                    " failed: " + (error != nullptr ? error : "unknown error"));
  }
  const TorchHooks* hooks = g_hooks.load();
  if (hooks == nullptr) throw RaydError(path + " was loaded but registered no hooks");
  return *hooks;
}

bool LibTorchInProcess() {
  int found = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        const char* base = name != nullptr ? std::strrchr(name, '/') : nullptr;
        if (base != nullptr && std::strncmp(base + 1, "libtorch_cpu.so", 15) == 0) {
          *static_cast<int*>(out) = 1;
          return 1;
        }
        return 0;
      },
      &found);
  return found != 0;
}

}  // namespace rayd::train::internal
