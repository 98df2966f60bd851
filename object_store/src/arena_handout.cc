#include "rayd/object_store/arena_handout.h"

#include <poll.h>
#include <sys/stat.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rayd::object_store {
namespace {

void ClosePipe(uv_pipe_t* pipe) {
  uv_close(reinterpret_cast<uv_handle_t*>(pipe),
           [](uv_handle_t* h) { delete reinterpret_cast<uv_pipe_t*>(h); });
}

// The one message of a handout: the arena's size as data, its descriptor as ancillary data.
struct FdMessage {
  explicit FdMessage(uint64_t* size) : iov{size, sizeof(*size)} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;

  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov;
  msghdr msg{};
};

bool SendFd(int socket, int fd, uint64_t size) {
  FdMessage m(&size);
  msghdr& msg = m.msg;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(size));
}

}  // namespace

ArenaHandout::ArenaHandout(EventLoop& loop, int fd, uint64_t size)
    : loop_(loop), fd_(fd), size_(size) {}

ArenaHandout::~ArenaHandout() {
  if (listener_ != nullptr) ClosePipe(listener_);
  if (!path_.empty()) unlink(path_.c_str());
}

Status ArenaHandout::Listen(const std::string& path) {
  unlink(path.c_str());  // a stale socket from a daemon that died
  listener_ = new uv_pipe_t;
  uv_pipe_init(loop_.uv(), listener_, 0);
  listener_->data = this;
  int rc = uv_pipe_bind(listener_, path.c_str());
  // Whoever connects is handed the arena's descriptor: the owner's processes only.
  if (rc == 0 && ::chmod(path.c_str(), 0600) != 0) rc = -errno;
  if (rc == 0) rc = uv_listen(reinterpret_cast<uv_stream_t*>(listener_), 64, &OnConnection);
  if (rc != 0) {
    ClosePipe(listener_);
    listener_ = nullptr;
    return Status::Unavailable("cannot listen on " + path + ": " + uv_strerror(rc));
  }
  path_ = path;
  return Status::Ok();
}

void ArenaHandout::OnConnection(uv_stream_t* server, int status) {
  auto* self = static_cast<ArenaHandout*>(server->data);
  if (status < 0) return;
  auto* client = new uv_pipe_t;
  uv_pipe_init(self->loop_.uv(), client, 0);
  if (uv_accept(server, reinterpret_cast<uv_stream_t*>(client)) == 0) {
    uv_os_fd_t socket = -1;
    // A fresh socket's send buffer always takes these 8 bytes: the send never blocks.
    if (uv_fileno(reinterpret_cast<uv_handle_t*>(client), &socket) != 0 ||
        !SendFd(socket, self->fd_, self->size_)) {
      spdlog::warn("could not hand the object store arena to a client: {}",
                   std::strerror(errno));
    }
  }
  ClosePipe(client);
}

Result<ReceivedArena> ReceiveArena(const std::string& path, Millis timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("object store socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  auto fail = [&](const std::string& what) -> Status {
    int err = errno;
    close(s);
    return Status::Unavailable("cannot receive the object store from " + path + ": " + what +
                               (err ? std::string(": ") + std::strerror(err) : ""));
  };
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return fail("connect");
  pollfd pfd{s, POLLIN, 0};
  int ready;
  do {
    ready = poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    errno = ready == 0 ? ETIMEDOUT : errno;
    return fail("no answer");
  }
  uint64_t size = 0;
  FdMessage m(&size);
  ssize_t n = recvmsg(s, &m.msg, MSG_CMSG_CLOEXEC);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&m.msg);
  if (n != static_cast<ssize_t>(sizeof(size)) || cmsg == nullptr ||
      cmsg->cmsg_type != SCM_RIGHTS) {
    errno = 0;
    return fail("malformed answer");
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
  close(s);
  return ReceivedArena{fd, size};
}

}  // namespace rayd::object_store
