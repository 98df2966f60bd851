#pragma once
// Child processes on an EventLoop (libuv), as the node daemon spawns workers and the head runs
// submitted jobs' drivers: stdin closed, stdout and stderr into one log file.
//
// Threading: the loop's thread only.

#include <uv.h>

#include <string>
#include <vector>

#include "rayd/base/event_loop.h"
#include "rayd/base/status.h"

namespace rayd {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up on the child's PATH
  std::vector<std::string> env;   // NAME=VALUE, the child's whole environment
  std::string cwd;                // "" : the parent's
  int log_fd = -1;                // stdout and stderr; the caller keeps and closes it
  int stderr_fd = -1;             // >= 0: stderr goes here instead (the caller's, as log_fd)
  bool own_process_group = false;  // setsid: the child leads a group, to signal as a whole
  uv_exit_cb on_exit = nullptr;
  void* data = nullptr;           // the handle's data, for on_exit
};

// Spawns `options.argv`. The handle stays the caller's until CloseProcessHandle, even after
// the process exits; Unavailable with libuv's reason when it could not start.
Result<uv_process_t*> SpawnProcess(EventLoop& loop, const SpawnOptions& options);
// Closes (and later frees) a handle SpawnProcess returned; its on_exit will not run any more.
void CloseProcessHandle(uv_process_t* process);

}  // namespace rayd
