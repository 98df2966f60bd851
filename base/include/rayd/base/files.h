#pragma once
// Small file writers with the guarantees rayd's on-disk state relies on.

#include <rayd/base/status.h>

#include <string>

namespace rayd {

// Writes `contents` to `path` through a temporary file beside it (".<name>.tmp"), fsync and a
// rename, so a reader (or a crash) sees either the old file or the new one, never a part.
// Creates the parent directories.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

// Appends `contents` to `path` (created, with its parent directories, when missing).
Status AppendToFile(const std::string& path, const std::string& contents);

}  // namespace rayd
