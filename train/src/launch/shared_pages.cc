// SharedPages (see shared_pages.h).

#include "shared_pages.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rayd::train::internal {

std::optional<SharedPages::Location> SharedPages::Find(const void* p, size_t n) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (const Region& r : regions_) {
      if (at < r.start || at >= r.end) continue;
      // In a mapping seen before: shared or not, as it was then. (One unmapped since and mapped
      // again at the same place as a memfd would send its batch through a file: slower, not
      // wrong.)
      if (!r.shared || r.path.empty() || at + n > r.end) return std::nullopt;
      return Location{r.path, r.file_offset + (at - r.start)};
    }
    if (attempt == 0) Reload();  // a mapping made since the last look
  }
  return std::nullopt;
}

void SharedPages::Reload() {
  regions_.clear();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode path
    std::istringstream in(line);
    std::string range, perms, dev, path;
    uint64_t offset = 0;
    ino_t inode = 0;
    in >> range >> perms >> std::hex >> offset >> dev >> std::dec >> inode;
    std::getline(in >> std::ws, path);
    Region r;
    if (std::sscanf(range.c_str(), "%lx-%lx", &r.start, &r.end) != 2) continue;
    r.shared = path.rfind("/memfd:", 0) == 0 && perms.size() >= 4 && perms[3] == 's';
    r.file_offset = offset;
    r.inode = inode;
    regions_.push_back(r);
  }
  if (std::none_of(regions_.begin(), regions_.end(), [](const Region& r) { return r.shared; })) {
    return;
  }
  // The descriptor of each: the memfd this process still holds open with that inode.
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return;
  const std::string pid = std::to_string(::getpid());
  while (dirent* e = ::readdir(fds)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (::fstat(std::atoi(e->d_name), &st) != 0) continue;
    for (Region& r : regions_) {
      if (r.shared && r.path.empty() && st.st_ino == r.inode) {
        r.path = "/proc/" + pid + "/fd/" + e->d_name;
      }
    }
  }
  ::closedir(fds);
}

}  // namespace rayd::train::internal
