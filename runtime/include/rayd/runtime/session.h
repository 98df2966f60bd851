#pragma once
// Session directories: where a daemon keeps its pid file, sockets, logs and the cluster token.
//
// Layout under the temp root (--temp-dir, else RAYD_TEMP_DIR, else /tmp/rayd):
//   session_<time>_<pid>_<kind>/   0700, one per daemon (kind: head | node)
//     <kind>.pid  token (0600)  gcs_address (head only)  logs/<kind>.log  *.sock
//     jobs/<submission id>/ (head only, `rayd job submit`): working_dir/, driver.log,
//       exit_code (once its driver ended), driver.pid ("PID STARTTICKS", while it runs)
//   session_latest -> the newest head session (how local commands find the head and token)

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rayd/base/status.h"

namespace rayd::session {

std::string ResolveTempRoot(const std::string& flag);
// Creates a fresh session directory (and logs/) with mode 0700.
Result<std::string> CreateSessionDir(const std::string& root, std::string_view kind);
// Writes `content` to `path` atomically (temp file + rename) with `mode`.
Status WriteFileWithMode(const std::string& path, const std::string& content, int mode);
// The file's content without trailing whitespace; NotFound when it does not exist.
Result<std::string> ReadTrimmed(const std::string& path);
// Points root/session_latest at `session_dir`.
Status MarkLatestHead(const std::string& root, const std::string& session_dir);
std::string LatestHeadSession(const std::string& root);
// Every session directory under `root`.
std::vector<std::string> ListSessions(const std::string& root);

// A process's start time (field 22 of /proc/PID/stat, clock ticks since boot); 0 when it does
// not run (or is a zombie). With its pid it names one process: a reused pid starts later.
uint64_t ProcessStartTicks(int pid);
// The submitted jobs' drivers that heads under `root` started and that still run (from their
// driver.pid files): each leads a process group of its own.
std::vector<int> RunningJobDrivers(const std::string& root);

}  // namespace rayd::session
