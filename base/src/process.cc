#include "rayd/base/process.h"

namespace rayd {

Result<uv_process_t*> SpawnProcess(EventLoop& loop, const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return Status::InvalidArgument("no command to run");
  }
  std::vector<char*> args;
  for (const auto& a : options.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (const auto& e : options.env) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);

  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = options.log_fd;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = options.stderr_fd >= 0 ? options.stderr_fd : options.log_fd;
  uv_process_options_t uv_options{};
  uv_options.file = args[0];
  uv_options.args = args.data();
  uv_options.env = env.data();
  uv_options.cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  uv_options.flags = options.own_process_group ? UV_PROCESS_DETACHED : 0;
  uv_options.exit_cb = options.on_exit;
  uv_options.stdio_count = 3;
  uv_options.stdio = stdio;

  auto* process = new uv_process_t;
  process->data = options.data;
  const int rc = uv_spawn(loop.uv(), process, &uv_options);
  if (rc != 0) {
    CloseProcessHandle(process);  // libuv wants a failed spawn's handle closed too
    return Status::Unavailable("cannot run " + options.argv[0] + ": " + uv_strerror(rc));
  }
  return process;
}

void CloseProcessHandle(uv_process_t* process) {
  process->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(process),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_process_t*>(h); });
}

}  // namespace rayd
