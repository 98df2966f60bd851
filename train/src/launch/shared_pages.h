#pragma once
// Where a pointer lies in shared memory this process maps from a memfd (the node's object store
// arena): the path another process of the same user opens to map the same pages
// (/proc/<pid>/fd/<fd>) and the offset there. Read from /proc/self/maps and /proc/self/fd.
//
// Threading: one SharedPages per thread (it caches the mappings it has seen).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rayd::train::internal {

class SharedPages {
 public:
  struct Location {
    std::string path;      // /proc/<pid>/fd/<fd>
    uint64_t offset = 0;   // of the pointer in that file
  };
  // Where [p, p + n) lies, when all of it is inside one memfd mapping this process still has
  // open; nullopt otherwise (heap memory, a file mapping, a closed descriptor). The maps are read
  // again only for an address in none of the mappings seen last time: a batch on the heap costs
  // no reading of /proc (hundreds of lines in a rank that links LibTorch) once its region is
  // known.
  std::optional<Location> Find(const void* p, size_t n);

 private:
  struct Region {
    uintptr_t start = 0, end = 0;
    uint64_t file_offset = 0;
    ino_t inode = 0;
    bool shared = false;  // a memfd mapped shared: one whose pages another process can map
    std::string path;     // a shared one's, "" until its descriptor is found
  };
  void Reload();
  std::vector<Region> regions_;
};

}  // namespace rayd::train::internal
