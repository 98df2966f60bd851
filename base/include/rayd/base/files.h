#pragma once
// Small file writers with the guarantees rayd's on-disk state relies on.

#include <rayd/base/status.h>

#include <string>

namespace rayd {

// Writes `contents` to `path` through a temporary file beside it (".<name>.tmp") and a rename,
// so a reader sees either the old file or the new one, never a part. With `durable` the data
// is fsynced before the rename, so a crash of the machine cannot leave an empty file either
// (it costs 10-20 ms on this disk: keep it for state a resume depends on). Creates the parent
// directories.
Status WriteFileAtomically(const std::string& path, const std::string& contents,
                           bool durable = true);

// Appends `contents` to `path` (created, with its parent directories, when missing).
Status AppendToFile(const std::string& path, const std::string& contents);

}  // namespace rayd
