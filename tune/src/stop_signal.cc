#include "stop_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rayd::tune::internal {

StopSignal::StopSignal() {
  if (pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("stop signal: pipe2: ") + std::strerror(errno));
  }
}

StopSignal::~StopSignal() {
  close(fds_[0]);
  close(fds_[1]);
}

void StopSignal::Raise() noexcept {
  if (raised_.exchange(true)) return;
  const char byte = 1;
  // Non-blocking; one byte into an empty pipe cannot fail for want of room.
  [[maybe_unused]] ssize_t written = write(fds_[1], &byte, 1);
}

}  // namespace rayd::tune::internal
