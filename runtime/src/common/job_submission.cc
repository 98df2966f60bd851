#include "common/job_submission.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rayd/api/runtime_env.h"
#include "rayd/base/capnp_bytes.h"

namespace rayd {

bool JobSubmissionInfo::terminal() const {
  return status == "SUCCEEDED" || status == "FAILED" || status == "STOPPED";
}

}  // namespace rayd

namespace rayd::runtime {
namespace fs = std::filesystem;

Result<JobRuntimeEnv> ParseJobRuntimeEnv(const std::string& json) {
  JobRuntimeEnv parsed;
  if (json.empty()) return parsed;
  try {
    RuntimeEnv env = RuntimeEnv::Deserialize(json);
    if (env.Contains("working_dir")) {
      parsed.working_dir = env.Get<std::string>("working_dir");
      env.Remove("working_dir");
    }
    parsed.env_vars = internal::EnvVarsOf(env);
  } catch (const RuntimeEnvError& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (a job also takes working_dir)");
  }
  return parsed;
}

void ToWire(const JobSubmissionInfo& job, proto::JobSubmission::Builder out) {
  out.setSubmissionId(job.submission_id);
  auto argv = out.initEntrypoint(static_cast<unsigned>(job.entrypoint.size()));
  for (size_t i = 0; i < job.entrypoint.size(); ++i) argv.set(i, job.entrypoint[i]);
  out.setStatus(job.status);
  out.setMessage(job.message);
  out.setPid(job.pid);
  out.setExitCode(job.exit_code);
  out.setStartTimeMs(job.start_time_ms);
  out.setEndTimeMs(job.end_time_ms);
  out.setWorkingDir(job.working_dir);
  out.setLogPath(job.log_path);
  out.setRuntimeEnvJson(job.runtime_env_json);
  out.setDriverStartTicks(job.driver_start_ticks);
}

JobSubmissionInfo FromWire(proto::JobSubmission::Reader in) {
  JobSubmissionInfo job;
  job.submission_id = in.getSubmissionId();
  for (auto arg : in.getEntrypoint()) job.entrypoint.emplace_back(arg);
  job.status = in.getStatus();
  job.message = in.getMessage();
  job.pid = in.getPid();
  job.exit_code = in.getExitCode();
  job.start_time_ms = in.getStartTimeMs();
  job.end_time_ms = in.getEndTimeMs();
  job.working_dir = in.getWorkingDir();
  job.log_path = in.getLogPath();
  job.runtime_env_json = in.getRuntimeEnvJson();
  job.driver_start_ticks = in.getDriverStartTicks();
  return job;
}

namespace {

std::string MiB(uint64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}

// Whether `relative` stays inside the directory it is relative to.
bool Contained(const std::string& relative) {
  if (relative.empty() || relative.front() == '/') return false;
  for (const auto& part : fs::path(relative)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

}  // namespace

Result<std::vector<PackedEntry>> ReadWorkingDir(const std::string& dir, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("working directory " + dir +
                                   (fs::exists(dir, ec) ? " is not a directory"
                                                        : " does not exist"));
  }
  const fs::path root = fs::canonical(dir, ec);
  if (ec) return Status::InvalidArgument("cannot read " + dir + ": " + ec.message());
  std::vector<PackedEntry> entries;
  uint64_t total = 0;
  auto it = fs::recursive_directory_iterator(root, fs::directory_options::none, ec);
  for (; !ec && it != fs::end(it); it.increment(ec)) {
    const fs::path& path = it->path();
    std::error_code type_ec;
    const bool is_dir = it->is_directory(type_ec);
    if (is_dir && path.filename() == ".git") {
      it.disable_recursion_pending();
      continue;
    }
    if (!is_dir && !it->is_regular_file(type_ec)) continue;  // sockets, fifos, dangling links
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return Status::InvalidArgument("cannot read " + path.string() + ": " + strerror(errno));
    }
    PackedEntry entry;
    entry.relative = path.lexically_relative(root).generic_string();  // a link keeps its name
    entry.mode = st.st_mode & 0777;
    entry.is_directory = is_dir;
    if (!is_dir) {
      total += static_cast<uint64_t>(st.st_size);
      if (total > max_bytes) {
        return Status::ResourceExhausted(
            "working directory " + dir + " holds more than " + MiB(max_bytes) +
            ", the most a job may ship: leave large data out and read it from shared storage");
      }
      std::ifstream in(path, std::ios::binary);
      entry.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (in.bad() || !in.is_open()) return Status::InvalidArgument("cannot read " + path.string());
    }
    entries.push_back(std::move(entry));
  }
  if (ec) return Status::InvalidArgument("cannot read " + dir + ": " + ec.message());
  return entries;
}

void PackWorkingDir(const std::vector<PackedEntry>& entries,
                    capnp::List<proto::PackedFile>::Builder out) {
  for (size_t i = 0; i < entries.size(); ++i) {
    auto file = out[static_cast<unsigned>(i)];
    file.setPath(entries[i].relative);
    file.setMode(entries[i].mode);
    file.setIsDirectory(entries[i].is_directory);
    if (!entries[i].is_directory) file.setData(AsData(entries[i].data));
  }
}

Status UnpackWorkingDir(capnp::List<proto::PackedFile>::Reader files, const std::string& into) {
  for (auto file : files) {
    const std::string relative = file.getPath();
    if (!Contained(relative)) {
      return Status::InvalidArgument("the working directory holds a path that leaves it: '" +
                                     relative + "'");
    }
    const fs::path target = fs::path(into) / relative;
    std::error_code ec;
    fs::create_directories(file.getIsDirectory() ? target : target.parent_path(), ec);
    if (ec) return Status::Internal("cannot create " + target.string() + ": " + ec.message());
    const mode_t mode = static_cast<mode_t>(file.getMode() & 0777);
    if (file.getIsDirectory()) {
      ::chmod(target.c_str(), mode | 0700);  // the head must still be able to write into it
      continue;
    }
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                    mode | 0600);
    if (fd < 0) return Status::Internal("cannot write " + target.string() + ": " + strerror(errno));
    auto data = file.getData();
    size_t written = 0;
    while (written < data.size()) {
      ssize_t n = ::write(fd, data.begin() + written, data.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string why = strerror(errno);
        ::close(fd);
        return Status::Internal("cannot write " + target.string() + ": " + why);
      }
      written += static_cast<size_t>(n);
    }
    ::fchmod(fd, mode | 0600);
    ::close(fd);
  }
  return Status::Ok();
}

}  // namespace rayd::runtime
