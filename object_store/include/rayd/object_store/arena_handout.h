#pragma once
// Hands an arena's descriptor to processes on the same node: a client connects to a Unix
// socket and receives the descriptor (SCM_RIGHTS) and the arena's size. Access control is the
// socket file's: it lives in the session directory, which only the cluster's user can enter.

#include <cstdint>
#include <string>

#include "rayd/base/event_loop.h"
#include "rayd/base/status.h"

namespace rayd::object_store {

class ArenaHandout {
 public:
  // `loop` must outlive the handout; `fd` stays owned by the caller and must outlive it too.
  ArenaHandout(EventLoop& loop, int fd, uint64_t size);
  ~ArenaHandout();  // stops listening and removes the socket file

  Status Listen(const std::string& path);

 private:
  static void OnConnection(uv_stream_t* server, int status);

  EventLoop& loop_;
  const int fd_;
  const uint64_t size_;
  std::string path_;
  uv_pipe_t* listener_ = nullptr;  // owned; freed by its close callback
};

struct ReceivedArena {
  int fd = -1;  // the caller owns it
  uint64_t size = 0;
};
// Connects to the handout at `path` and receives the arena (blocking, at most `timeout`).
Result<ReceivedArena> ReceiveArena(const std::string& path, Millis timeout);

}  // namespace rayd::object_store
