#include "rayd/runtime/session.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace rayd::session {

namespace fs = std::filesystem;

std::string ResolveTempRoot(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("RAYD_TEMP_DIR"); env && *env) return env;
  return "/tmp/rayd";
}

static Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
  }
  ::chmod(path.c_str(), mode);
  return Status::Ok();
}

Result<std::string> CreateSessionDir(const std::string& root, std::string_view kind) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::Internal("cannot create " + root + ": " + ec.message());
  ::chmod(root.c_str(), 0700);
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d_%H-%M-%S", std::localtime(&now));
  std::string dir =
      root + "/session_" + stamp + "_" + std::to_string(::getpid()) + "_" + std::string(kind);
  RAYD_RETURN_IF_ERROR(MakeDir(dir, 0700));
  RAYD_RETURN_IF_ERROR(MakeDir(dir + "/logs", 0700));
  return dir;
}

Status WriteFileWithMode(const std::string& path, const std::string& content, int mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0) return Status::Internal("cannot write " + path + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      ::close(fd);
      return Status::Internal("cannot write " + path + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<std::string> ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

Status MarkLatestHead(const std::string& root, const std::string& session_dir) {
  std::string link = root + "/session_latest";
  std::string tmp = link + ".tmp." + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (::symlink(session_dir.c_str(), tmp.c_str()) != 0 || ::rename(tmp.c_str(), link.c_str()) != 0) {
    return Status::Internal("cannot update " + link + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

std::string LatestHeadSession(const std::string& root) {
  std::error_code ec;
  auto target = fs::read_symlink(root + "/session_latest", ec);
  return ec ? "" : target.string();
}

std::vector<std::string> ListSessions(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto name = entry.path().filename().string();
    if (name.starts_with("session_") && name != "session_latest" && entry.is_directory())
      out.push_back(entry.path().string());
  }
  return out;
}

uint64_t ProcessStartTicks(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  fields >> field;  // field 3: the state
  if (field == "Z" || field == "X") return 0;
  for (int i = 4; i <= 22; ++i) fields >> field;
  return std::strtoull(field.c_str(), nullptr, 10);
}

std::vector<int> RunningJobDrivers(const std::string& root) {
  std::vector<int> pids;
  for (const auto& session : ListSessions(root)) {
    std::error_code ec;
    for (const auto& job : std::filesystem::directory_iterator(session + "/jobs", ec)) {
      std::ifstream in(job.path() / "driver.pid");
      int pid = 0;
      uint64_t ticks = 0;
      if (in >> pid >> ticks && ticks != 0 && ProcessStartTicks(pid) == ticks) {
        pids.push_back(pid);
      }
    }
  }
  return pids;
}

}  // namespace rayd::session
