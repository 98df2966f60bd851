// DataServer: a command rank's datasets over a Unix socket (see data_server.h).

#include "data_server.h"

#include "../data_feed.h"
#include "../datasets.h"
#include "batch_slots.h"
#include "shared_pages.h"

#include <fcntl.h>
#include <poll.h>
#include <rayd/train/data.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace rayd::train::internal {

class DataServer::Impl {
 public:
  Impl(int listen_fd, std::string datasets_json, int world_size, int rank, int local_world_size,
       std::string resume_dir, std::string run_name)
      : listen_fd_(listen_fd),
        datasets_json_(std::move(datasets_json)),
        resume_dir_(std::move(resume_dir)),
        world_size_(world_size),
        rank_(rank),
        local_world_size_(local_world_size),
        feed_(std::move(run_name), rank, world_size) {
    if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
    thread_ = std::thread([this] { Serve(); });
  }
  ~Impl() {
    (void)!::write(stop_pipe_[1], "x", 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
    for (auto& [name, state] : datasets_) RemoveFile(state);
  }

  Status WritePositions(const std::string& dir) {
    std::map<std::string, data::ShardPosition> positions;
    {
      std::lock_guard lock(mu_);
      for (const auto& [name, d] : datasets_) {
        positions[name] = d.taken ? *d.taken : d.shard->position();
      }
    }
    if (positions.empty()) return Status::Ok();
    return WriteDataPositions(positions, dir);
  }

  std::map<std::string, double> PublishFeed(bool rank_waits) {
    DataFeed::Shards shards;
    double waited = 0;
    {
      std::lock_guard lock(mu_);
      shards = Shards();
      for (const auto& [name, shard] : shards) waited += shard->stats().wait_seconds;
    }
    if (shards.empty()) return {};
    feed_.Publish(shards);
    std::map<std::string, double> columns = DataFeed::CacheColumns(shards);
    if (rank_waits && world_size_ > 1) columns.merge(feed_.RankWaitColumns(waited));
    return columns;
  }

 private:
  // The shards opened so far (the server thread's, or under mu_).
  DataFeed::Shards Shards() const {
    DataFeed::Shards shards;
    for (const auto& [name, d] : datasets_) shards.emplace(name, d.shard.get());
    return shards;
  }

  struct Dataset {
    std::unique_ptr<data::DatasetShard> shard;
    std::unique_ptr<data::BatchIterator> pass;
    std::string file;  // the last batch's file, removed at the next request
    double waited_reported = 0;
    // With batches asked for ahead: the position after the batches the loop has taken (every
    // one handed out but the last), which a checkpoint records; unset, the shard's own.
    std::optional<data::ShardPosition> taken;
  };

  static void RemoveFile(Dataset& d) {
    if (!d.file.empty()) ::unlink(d.file.c_str());
    d.file.clear();
  }

  // Waits for `fd` readable or the stop pipe; false on stop.
  bool WaitReadable(int fd) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    while (true) {
      const int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (fds[1].revents & POLLIN)) return false;
      return true;
    }
  }

  // True when `fd` is readable right now.
  static bool ReadableNow(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
  }

  // Opens the run's datasets, in the run's order, while the process starts: a Python rank spends
  // a second or more importing numpy and torch before its first request, and the shard's open
  // (a gzipped file inflated, a folder listed) can run meanwhile instead of after it. Stops once
  // the process connects; a dataset that fails to open is left for its request to report.
  void OpenAhead() {
    nlohmann::json json = nlohmann::json::parse(datasets_json_, nullptr, false);
    Result<std::vector<data::DatasetSpec>> specs = DatasetsFromJson(json);
    if (!specs.ok()) return;
    for (const data::DatasetSpec& spec : *specs) {
      if (ReadableNow(listen_fd_) || ReadableNow(stop_pipe_[0])) return;
      (void)Find(spec.name);
    }
  }

  void Serve() {
    OpenAhead();
    while (WaitReadable(listen_fd_)) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      std::string buffer;
      char chunk[4096];
      bool open = true;
      while (open && WaitReadable(client)) {
        const ssize_t n = ::read(client, chunk, sizeof(chunk));
        if (n <= 0) break;
        buffer.append(chunk, static_cast<size_t>(n));
        size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
          const std::string reply = Handle(buffer.substr(0, newline)).dump() + "\n";
          buffer.erase(0, newline + 1);
          if (!WriteAll(client, reply)) {
            open = false;
            break;
          }
        }
      }
      ::close(client);
      for (auto& [name, state] : datasets_) RemoveFile(state);
      leases_.clear();
      slots_.ReleaseAll();
    }
  }

  static bool WriteAll(int fd, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  static nlohmann::json Error(const std::string& message) {
    return {{"ok", false}, {"error", message}};
  }

  Result<Dataset*> Find(const std::string& name) {
    auto it = datasets_.find(name);
    if (it != datasets_.end()) return &it->second;
    RAYD_ASSIGN_OR_RETURN(std::unique_ptr<data::DatasetShard> shard,
                          OpenRankShard(datasets_json_, name, world_size_, rank_,
                                        local_world_size_));
    if (!resume_dir_.empty()) ResumeShard(*shard, name, resume_dir_);
    std::lock_guard lock(mu_);
    Dataset& d = datasets_[name];
    d.shard = std::move(shard);
    return &d;
  }

  nlohmann::json Handle(const std::string& line) {
    nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!request.is_object() || !request.value("op", nlohmann::json()).is_string() ||
        !request.value("dataset", nlohmann::json()).is_string()) {
      return Error("a malformed data request (expected a JSON object with op and dataset)");
    }
    const std::string op = request["op"].get<std::string>();
    // Batches the process no longer uses (their arrays are gone): their blocks may go.
    for (const nlohmann::json& id : request.value("release", nlohmann::json::array())) {
      if (!id.is_number_unsigned()) continue;
      leases_.erase(id.get<uint64_t>());
      slots_.Release(id.get<uint64_t>());
    }
    Result<Dataset*> found = Find(request["dataset"].get<std::string>());
    if (!found.ok()) return Error(found.status().message());
    Dataset& d = **found;
    RemoveFile(d);
    if (op == "open") {
      nlohmann::json columns = nlohmann::json::array();
      for (const data::ColumnSchema& c : d.shard->schema()) {
        columns.push_back({{"name", c.name},
                           {"dtype", std::string(data::NumpyDescr(c.dtype))},
                           {"shape", c.shape}});
      }
      return {{"ok", true},
              {"num_rows", d.shard->num_rows()},
              {"rows_per_epoch", d.shard->rows_per_epoch()},
              {"next_epoch", d.shard->next_epoch()},  // a resumed run's: where it goes on
              {"columns", columns}};
    }
    if (op == "iter") {
      data::BatchOptions options;
      options.batch_size = request.value("batch_size", int64_t{256});
      options.drop_last = request.value("drop_last", false);
      options.epoch = request.value("epoch", int64_t{-1});
      options.local_shuffle_buffer_size = request.value("local_shuffle_buffer_size", int64_t{0});
      if (options.batch_size < 1) return Error("iter_batches: batch_size must be at least 1");
      d.pass.reset();  // an earlier pass's producer stops first
      SetTaken(d, std::nullopt);
      options.epoch = options.epoch >= 0 ? options.epoch : d.shard->next_epoch();
      d.pass = d.shard->IterBatches(options);
      return {{"ok", true}, {"epoch", options.epoch}};
    }
    if (op == "next") {
      if (!d.pass) return Error("next before iter");
      // `ahead`: the process asks for this batch while its loop still works on the one before
      // (python/rayd/data.py), having taken every batch before it, not this one.
      const bool ahead = request.value("ahead", false);
      SetTaken(d, ahead ? std::optional(d.shard->position()) : std::nullopt);
      Result<std::optional<data::Block>> next = d.pass->Next();
      const double waited = d.shard->stats().wait_seconds;
      const double wait_s = waited - d.waited_reported;
      d.waited_reported = waited;
      feed_.Touch([this] { return Shards(); });
      if (!next.ok()) {
        d.pass.reset();
        return Error(next.status().message());
      }
      if (!*next) {
        d.pass.reset();
        if (ahead) SetTaken(d, d.shard->position());  // the end of a pass holds no rows
        feed_.Publish(Shards());
        return {{"ok", true}, {"end", true}, {"wait_s", wait_s}};
      }
      if (std::optional<nlohmann::json> shared = DescribeShared(**next);
          shared && request.value("shared", false)) {
        const uint64_t lease = next_lease_++;
        leases_.emplace(lease, std::move(**next));
        return {{"ok", true}, {"shared", std::move(*shared)}, {"lease", lease}, {"wait_s", wait_s}};
      }
      if (request.value("slots", false)) {
        if (std::optional<nlohmann::json> slot = CopyToSlot(**next)) {
          (*slot)["wait_s"] = wait_s;
          return std::move(*slot);
        }
      }
      Result<std::string> file = WriteBatch(**next);
      if (!file.ok()) return Error(file.status().message());
      d.file = *file;
      return {{"ok", true},
              {"path", *file},
              {"size", (**next).SerializedSize()},
              {"wait_s", wait_s}};
    }
    return Error("unknown op '" + op + "' (open, iter, next)");
  }

  void SetTaken(Dataset& d, std::optional<data::ShardPosition> taken) {
    std::lock_guard lock(mu_);
    d.taken = std::move(taken);
  }

  // A batch whose columns all lie in one shared mapping (a block in the node's object store):
  // the pages for the process to map itself, and each column's place in them. nullopt for
  // anything else (a block made in this process, bytes columns), which goes through a file.
  std::optional<nlohmann::json> DescribeShared(const data::Block& batch) {
    if (batch.columns().empty()) return std::nullopt;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const data::Column& c : batch.columns()) {
      if (c.is_bytes()) return std::nullopt;
      const auto at = reinterpret_cast<uintptr_t>(c.data);
      lo = std::min(lo, at);
      hi = std::max(hi, at + static_cast<uintptr_t>(c.RowBytes() * batch.num_rows()));
    }
    std::optional<SharedPages::Location> where =
        shared_pages_.Find(reinterpret_cast<const void*>(lo), hi - lo);
    if (!where) return std::nullopt;
    // mmap takes page-aligned offsets: map from the page the batch starts in.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t skip = where->offset % page;
    nlohmann::json columns = nlohmann::json::array();
    for (const data::Column& c : batch.columns()) {
      columns.push_back({{"name", c.name()},
                         {"dtype", std::string(data::NumpyDescr(c.dtype()))},
                         {"shape", c.schema.shape},
                         {"offset", skip + (reinterpret_cast<uintptr_t>(c.data) - lo)}});
    }
    return nlohmann::json{{"path", where->path},
                          {"offset", where->offset - skip},
                          {"length", skip + (hi - lo)},
                          {"rows", batch.num_rows()},
                          {"columns", std::move(columns)}};
  }

  // The batch copied into one of the reused slots (batch_slots.h), described as a shared batch
  // is, with the slot and its lease: nullopt for bytes columns, or when no slot is free (the
  // process holds every one) and no more may be made.
  std::optional<nlohmann::json> CopyToSlot(const data::Block& batch) {
    if (batch.columns().empty() || batch.num_rows() == 0) return std::nullopt;
    std::vector<size_t> offsets;
    size_t bytes = 0;
    for (const data::Column& c : batch.columns()) {
      if (c.is_bytes()) return std::nullopt;
      offsets.push_back(bytes);
      const auto n = static_cast<size_t>(c.RowBytes() * batch.num_rows());
      bytes += (n + 63) / 64 * 64;  // each column 64-byte aligned, as in a block
    }
    if (bytes == 0) return std::nullopt;  // columns of no elements: nothing to map
    const uint64_t lease = next_lease_;
    std::optional<BatchSlots::Slot> slot = slots_.Take(bytes, lease);
    if (!slot) return std::nullopt;
    ++next_lease_;
    nlohmann::json columns = nlohmann::json::array();
    for (size_t i = 0; i < batch.columns().size(); ++i) {
      const data::Column& c = batch.columns()[i];
      std::memcpy(slot->data + offsets[i], c.data,
                  static_cast<size_t>(c.RowBytes() * batch.num_rows()));
      columns.push_back({{"name", c.name()},
                         {"dtype", std::string(data::NumpyDescr(c.dtype()))},
                         {"shape", c.schema.shape},
                         {"offset", offsets[i]}});
    }
    return nlohmann::json{{"ok", true},
                          {"shared", {{"path", slot->path},
                                      {"offset", 0},
                                      {"length", bytes},
                                      {"rows", batch.num_rows()},
                                      {"columns", std::move(columns)}}},
                          {"slot", {{"id", slot->id}, {"capacity", slot->capacity}}},
                          {"lease", lease}};
  }

  // The batch in a new file in /dev/shm (shared memory), its path.
  Result<std::string> WriteBatch(const data::Block& batch) {
    const std::string path = "/dev/shm/rayd-data-" + std::to_string(::getpid()) + "-" +
                             std::to_string(files_made_++);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return Status::Internal("cannot create " + path + ": " + std::strerror(errno));
    const std::string bytes = batch.Serialize();
    const bool ok = WriteAll(fd, bytes);
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      return Status::ResourceExhausted("cannot write a batch to " + path + " (/dev/shm full?)");
    }
    return path;
  }

  const int listen_fd_;
  const std::string datasets_json_;
  const std::string resume_dir_;
  const int world_size_, rank_, local_world_size_;
  DataFeed feed_;
  mutable std::mutex mu_;  // guards datasets_'s entries being added and their `taken` set (the
                           // server thread) against WritePositions (the report's thread)
  int stop_pipe_[2] = {-1, -1};
  std::map<std::string, Dataset> datasets_;  // the server thread's
  uint64_t files_made_ = 0;
  // Batches the process maps where the object store holds them, by lease: their blocks (and so
  // their objects) stay until it releases them.
  std::map<uint64_t, data::Block> leases_;
  uint64_t next_lease_ = 0;
  // Batches copied into reused shared memory ("slots"), leased the same way.
  BatchSlots slots_;
  SharedPages shared_pages_;
  std::thread thread_;  // last: started once the rest is set
};

DataServer::DataServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataServer::~DataServer() = default;

Status DataServer::WritePositions(const std::string& dir) { return impl_->WritePositions(dir); }
std::map<std::string, double> DataServer::PublishFeed(bool rank_waits) {
  return impl_->PublishFeed(rank_waits);
}

Result<std::unique_ptr<DataServer>> DataServer::Start(const std::string& socket_path,
                                                      const std::string& datasets_json,
                                                      int world_size, int rank,
                                                      int local_world_size,
                                                      const std::string& resume_dir,
                                                      const std::string& run_name) {
  // Malformed datasets fail now, not at the process's first request.
  nlohmann::json json = nlohmann::json::parse(datasets_json, nullptr, /*allow_exceptions=*/false);
  RAYD_RETURN_IF_ERROR(DatasetsFromJson(json).status());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("the data socket's path is too long: " + socket_path);
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  ::unlink(socket_path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 4) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::Internal("cannot listen on " + socket_path + ": " + why);
  }
  return std::unique_ptr<DataServer>(new DataServer(
      std::make_unique<Impl>(fd, datasets_json, world_size, rank, local_world_size, resume_dir,
                             run_name)));
}

}  // namespace rayd::train::internal
