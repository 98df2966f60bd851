#pragma once
// Small file writers with the guarantees rayd's on-disk state relies on.

#include <rayd/base/status.h>

#include <string>
#include <string_view>
#include <vector>

namespace rayd {

// Writes `contents` to `path` through a temporary file beside it (".<name>.tmp") and a rename,
// so a reader sees either the old file or the new one, never a part. With `durable` the data
// is fsynced before the rename, so a crash of the machine cannot leave an empty file either
// (it costs 10-20 ms on this disk: keep it for state a resume depends on). Creates the parent
// directories.
Status WriteFileAtomically(const std::string& path, const std::string& contents,
                           bool durable = true);

// A directory of one process's scratch files, marked live by a lock its process holds until it
// ends, however it ends: its node removes a worker's when it sees the worker die, and a node
// that starts removes those whose process died with no node left to see it (a SIGKILLed node's
// workers). MakeOwnedDirectory makes `path` (its parent must exist) and holds a shared flock on
// it for the rest of this process's life, through a descriptor its child processes inherit (a
// command rank's scratch stays live while the command runs). It makes it under another name
// and renames it into place once locked, so that no one ever sees it unlocked. Once per path;
// an existing directory there is an error.
Status MakeOwnedDirectory(const std::string& path);
// Removes every directory in `parent` whose name starts with `prefix` and whose lock nobody
// holds (its process is dead; or it was made before these locks, by a rayd that is gone);
// returns the paths removed. Files, links and live directories are left alone.
std::vector<std::string> RemoveDeadOwnedDirectories(const std::string& parent,
                                                    std::string_view prefix);

// Appends `contents` to `path` (created, with its parent directories, when missing).
Status AppendToFile(const std::string& path, const std::string& contents);

// A file kept open for appending, for logs written a line at a time (result.json, progress.csv).
// Appends collect in memory until Flush, which hands them to the kernel in one write: a batch
// of lines costs one system call, and none pays the open, close and directory checks that
// AppendToFile pays per call (~30 us against ~4 us for a write here). The owner flushes when a
// batch ends (before it waits for more work), so what a crash of the process can lose is what
// it had not finished handling anyway. The file is opened (O_APPEND, created with its parent
// directories) by the first Flush that has something to write. Whoever replaces the file (a
// rename over it) calls Close first, so later appends go to the new one. Appends past
// kFlushAt flush on their own. The destructor flushes (errors ignored) and closes.
// One owner; not safe for concurrent use.
class AppendFile {
 public:
  static constexpr size_t kFlushAt = 1 << 16;

  explicit AppendFile(std::string path) : path_(std::move(path)) {}
  ~AppendFile() { (void)Close(); }
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Errors are those of a flush it set off; else Ok.
  Status Append(std::string_view contents);
  // Writes what was appended since the last Flush (nothing to write: no system call).
  Status Flush();
  // Flushes, then closes the descriptor (the next Flush opens the file again).
  Status Close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string pending_;
  int fd_ = -1;
};

}  // namespace rayd
