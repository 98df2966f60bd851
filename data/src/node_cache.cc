// The node cache behind `{cache: node}` (see node_cache.h), and the prefixed blocks data tasks
// hand over.
#include "node_cache.h"

#include <rayd/data/transforms.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace rayd::data {
namespace internal {

constexpr size_t kPrefixBytes = 64;

std::vector<uint8_t> Prefixed(const Block& block, const BlockCounts& counts) {
  std::vector<uint8_t> out(kPrefixBytes + block.SerializedSize());
  const uint64_t fields[3] = {static_cast<uint64_t>(counts.skipped),
                              static_cast<uint64_t>(counts.cache_made),
                              static_cast<uint64_t>(counts.cache_hits)};
  std::memcpy(out.data(), fields, sizeof(fields));
  block.SerializeTo(out.data() + kPrefixBytes);
  return out;
}

Result<Block> ViewPrefixed(const ObjectRef<std::vector<uint8_t>>& ref, BlockCounts* counts) {
  auto view = std::make_shared<ArrayView<uint8_t>>(rayd::GetView(ref));
  if (view->size() < kPrefixBytes) return Status::Internal("a data task returned no block");
  uint64_t fields[3] = {};
  std::memcpy(fields, view->data(), sizeof(fields));
  counts->skipped += static_cast<int64_t>(fields[0]);
  counts->cache_made += static_cast<int64_t>(fields[1]);
  counts->cache_hits += static_cast<int64_t>(fields[2]);
  return Block::View(view, view->data() + kPrefixBytes, view->size() - kPrefixBytes);
}

namespace {

constexpr char kNamespace[] = "rayd_data";
constexpr int64_t kDefaultCacheBytes = int64_t{512} << 20;
constexpr double kDefaultIdleSeconds = 30;
constexpr int64_t kDefaultBlockBytes = int64_t{4} << 20;
// Options that change where or how rows are made, or in what order they are taken, not what
// they are: left out of the fingerprint.
constexpr const char* kNotInFingerprint[] = {
    "seed",          "shuffle",   "execution",  "prefetch_blocks", "block_bytes",
    "budget_bytes",  "resources", "label_selector", "rows",        "transforms",
    "cache_bytes",   "cache_idle_s"};

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string Hex(uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(v));
  return out;
}

std::string RemoteText(const std::exception& e) {
  const auto* remote = dynamic_cast<const RemoteError*>(&e);
  std::string m = remote != nullptr ? remote->remote_message() : std::string(e.what());
  return m.substr(0, m.find('\n'));
}

// The steps of `spec`'s transforms before its cache step.
Result<std::vector<TransformStep>> StepsBeforeCache(const DatasetSpec& spec) {
  Result<std::vector<TransformStep>> steps =
      ParseTransforms(spec.options.value("transforms", nlohmann::json()));
  if (!steps.ok()) {
    return Status::InvalidArgument("datasets." + spec.name + "." + steps.status().message());
  }
  const std::optional<size_t> cache = CacheStep(*steps);
  if (!cache) return Status::Internal("datasets." + spec.name + ": no cache step");
  steps->resize(*cache);
  return std::move(*steps);
}

}  // namespace

Result<std::string> CacheFingerprint(const DatasetSpec& spec) {
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& pattern : spec.paths) {
    RAYD_ASSIGN_OR_RETURN(std::vector<std::string> matched, ExpandGlob(pattern));
    for (const std::string& path : matched) {
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0) {
        return Status::NotFound("datasets." + spec.name + ": cannot stat " + path);
      }
      files.push_back({path, static_cast<int64_t>(st.st_size),
                       static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                           st.st_mtim.tv_nsec});
    }
  }
  nlohmann::json options = spec.options;
  for (const char* key : kNotInFingerprint) options.erase(key);
  // The transforms' entries before the cache step, as written.
  nlohmann::json before = nlohmann::json::array();
  for (const nlohmann::json& entry : spec.options.value("transforms", nlohmann::json::array())) {
    if (entry.is_object() && entry.contains("cache")) break;
    if (entry.is_object() && !entry.contains("limit")) before.push_back(entry);
  }
  const nlohmann::json what{{"format", spec.format}, {"files", files}, {"options", options},
                            {"steps", before}};
  return Hex(Fnv1a(what.dump()));
}

}  // namespace internal

// How the node cache cuts a dataset: chunks of chunk_rows rows (the last one shorter).
struct CacheShape {
  int64_t chunk_rows = 1;
  int64_t num_rows = 0;
  MSGPACK_DEFINE(chunk_rows, num_rows);
};

// The chunks a reader asked for, in the order asked.
struct CachedChunks {
  std::vector<ObjectRef<std::vector<uint8_t>>> blocks;  // borrowed from the cache's actor
  int64_t made = 0;
  int64_t hits = 0;
  MSGPACK_DEFINE(blocks, made, hits);
};

// The node cache of one dataset fingerprint (node_cache.h): a detached actor on its node.
class RaydDataCache {
 public:
  static RaydDataCache* FactoryCreate(std::string spec_key) {
    nlohmann::json j = nlohmann::json::parse(spec_key, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw RaydError("the node cache got a malformed dataset spec");
    DatasetSpec spec;
    spec.name = j.value("name", "");
    spec.format = j.value("format", "");
    spec.paths = j.value("paths", std::vector<std::string>());
    spec.options = j.value("options", nlohmann::json::object());
    Result<std::unique_ptr<Reader>> reader = OpenReader(spec);
    if (!reader.ok()) throw RaydError("datasets." + spec.name + ": " + reader.status().message());
    Result<std::vector<TransformStep>> steps = internal::StepsBeforeCache(spec);
    if (!steps.ok()) throw RaydError(steps.status().message());
    return new RaydDataCache(std::move(spec), std::move(*reader), std::move(*steps));
  }

  CacheShape Shape() {
    Call call(*this);
    return {chunk_rows_, num_rows_};
  }

  // Chunks `ids`, made first where this cache lacks them. No ids: a reader still using chunks
  // it holds says so (the cache stays while anyone uses it).
  CachedChunks Chunks(std::vector<int64_t> ids) {
    Call call(*this);
    CachedChunks out;
    for (const int64_t id : ids) {
      if (id < 0 || id * chunk_rows_ >= num_rows_) {
        throw RaydError("datasets." + spec_.name + ": no chunk " + std::to_string(id) +
                        " of the dataset's " + std::to_string(num_rows_) + " rows");
      }
      out.blocks.push_back(Take(id, &out));
    }
    return out;
  }

 private:
  struct Chunk {
    bool ready = false;
    std::optional<ObjectRef<std::vector<uint8_t>>> ref;
    int64_t bytes = 0;
    std::list<int64_t>::iterator used;  // its place in used_ once ready
  };

  // Counts the calls in flight and when the last one came, for Watch.
  struct Call {
    explicit Call(RaydDataCache& c) : cache(c) {
      ++cache.calls_;
      cache.last_call_ns_ = Now();
    }
    ~Call() {
      cache.last_call_ns_ = Now();
      --cache.calls_;
    }
    RaydDataCache& cache;
  };

  RaydDataCache(DatasetSpec spec, std::unique_ptr<Reader> reader, std::vector<TransformStep> steps)
      : spec_(std::move(spec)), reader_(std::move(reader)), steps_(std::move(steps)) {
    num_rows_ = reader_->num_rows();
    const nlohmann::json& o = spec_.options;
    int64_t block_bytes = o.value("block_bytes", internal::kDefaultBlockBytes);
    budget_bytes_ = o.value("cache_bytes", internal::kDefaultCacheBytes);
    idle_s_ = o.value("cache_idle_s", internal::kDefaultIdleSeconds);
    int64_t row_bytes = 1;
    if (num_rows_ > 0) {
      const int64_t first = 0;
      if (Result<Block> row = reader_->Read({&first, 1}); row.ok()) {
        row_bytes = std::max<int64_t>(row->nbytes(), 1);
      }
    }
    chunk_rows_ = std::max<int64_t>(1, block_bytes / row_bytes);
    last_call_ns_ = Now();
    std::thread([this] { Watch(); }).detach();
  }

  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Chunk `id`: held, being made by another call (waited for), or made now.
  ObjectRef<std::vector<uint8_t>> Take(int64_t id, CachedChunks* out) {
    std::unique_lock lock(mu_);
    while (true) {
      auto it = chunks_.find(id);
      if (it == chunks_.end()) break;
      if (it->second.ready) {
        used_.splice(used_.end(), used_, it->second.used);
        ++out->hits;
        return *it->second.ref;
      }
      made_.wait(lock);  // made, or failed and gone: look again
    }
    chunks_.emplace(id, Chunk{});
    lock.unlock();
    int64_t bytes = 0;
    Result<ObjectRef<std::vector<uint8_t>>> made = Make(id, &bytes);
    lock.lock();
    auto it = chunks_.find(id);
    if (!made.ok()) {
      chunks_.erase(it);
      made_.notify_all();
      throw RaydError(made.status().message());
    }
    Chunk& chunk = it->second;
    chunk.ready = true;
    chunk.ref = *made;
    chunk.bytes = bytes;
    chunk.used = used_.insert(used_.end(), id);
    held_bytes_ += chunk.bytes;
    // Over budget: the least recently used go (readers that took them keep theirs alive).
    while (held_bytes_ > budget_bytes_ && used_.size() > 1) {
      auto oldest = chunks_.find(used_.front());
      held_bytes_ -= oldest->second.bytes;
      used_.pop_front();
      chunks_.erase(oldest);
    }
    ++out->made;
    made_.notify_all();
    return *made;
  }

  Result<ObjectRef<std::vector<uint8_t>>> Make(int64_t id, int64_t* bytes) {
    const int64_t begin = id * chunk_rows_, end = std::min(num_rows_, begin + chunk_rows_);
    std::vector<int64_t> rows(static_cast<size_t>(end - begin));
    for (int64_t r = begin; r < end; ++r) rows[static_cast<size_t>(r - begin)] = r;
    Result<Block> block = [&]() -> Result<Block> {
      std::lock_guard lock(read_mu_);  // readers are single-threaded
      return reader_->Read(rows);
    }();
    const std::string at = "datasets." + spec_.name + ": ";
    if (!block.ok()) return Status(block.status().code(), at + block.status().message());
    if (block->num_rows() != end - begin) {
      return Status::InvalidArgument(at + "rows " + std::to_string(begin) + ".." +
                                     std::to_string(end - 1) +
                                     ": rows were skipped (on_error: skip); cache: node keeps "
                                     "every row in place, so it cannot skip bad ones");
    }
    Result<Block> out = ApplyTransforms(steps_, std::move(*block));
    if (!out.ok()) return Status(out.status().code(), at + out.status().message());
    if (out->num_rows() != end - begin) {
      return Status::InvalidArgument(at + "a step before cache: node changed the number of "
                                     "rows; only steps that keep every row may come before it");
    }
    std::vector<uint8_t> prefixed = internal::Prefixed(*out, {});
    *bytes = static_cast<int64_t>(prefixed.size());
    return rayd::Put(std::move(prefixed));
  }

  // Exits the actor's process once no call has come for idle_s_ seconds: its chunks go with it.
  void Watch() {
    const auto idle_ns = static_cast<int64_t>(idle_s_ * 1e9);
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      if (calls_ == 0 && Now() - last_call_ns_ > idle_ns) std::_Exit(0);
    }
  }

  const DatasetSpec spec_;
  const std::unique_ptr<Reader> reader_;
  const std::vector<TransformStep> steps_;
  int64_t num_rows_ = 0;
  int64_t chunk_rows_ = 1;
  int64_t budget_bytes_ = 0;
  double idle_s_ = 0;
  std::mutex read_mu_;
  std::mutex mu_;
  std::condition_variable made_;
  std::map<int64_t, Chunk> chunks_;  // guarded by mu_
  std::list<int64_t> used_;          // guarded by mu_: ready chunks, least recently used first
  int64_t held_bytes_ = 0;           // guarded by mu_
  std::atomic<int> calls_{0};
  std::atomic<int64_t> last_call_ns_{0};
};

RAYD_REMOTE(RaydDataCache::FactoryCreate, &RaydDataCache::Shape, &RaydDataCache::Chunks);

namespace internal {
namespace {

// This node's cache actor for `fingerprint`: the running one, or a new one. `fresh`: forget the
// handle this process had (its actor ended).
ActorHandle<RaydDataCache> NodeCacheActor(const std::string& fingerprint,
                                          const std::string& spec_key, bool fresh) {
  static std::mutex mu;
  static auto* handles = new std::map<std::string, ActorHandle<RaydDataCache>>();
  std::lock_guard lock(mu);
  if (fresh) handles->erase(fingerprint);
  if (auto it = handles->find(fingerprint); it != handles->end()) return it->second;
  const std::string node = rayd::GetNodeId();
  const std::string name = "rayd-data-cache-" + node.substr(0, 12) + "-" + fingerprint;
  std::optional<ActorHandle<RaydDataCache>> actor = GetActor<RaydDataCache>(name, kNamespace);
  if (!actor) {
    try {
      actor = rayd::Actor(RaydDataCache::FactoryCreate)
                  .SetName(name, kNamespace)
                  .SetDetached()
                  .SetNodeAffinity(node)
                  .SetMaxConcurrency(16)
                  .SetResources({{"CPU", 0}})
                  .Remote(spec_key);
    } catch (const RaydError&) {
      // Another reader on this node started it first (the name is taken).
      actor = GetActor<RaydDataCache>(name, kNamespace);
      if (!actor) throw;
    }
  }
  handles->emplace(fingerprint, *actor);
  return *actor;
}

// The fingerprint of each spec this process has read through the cache (a stat of every file
// per block would cost more than it tells).
Result<std::string> FingerprintOf(const DatasetSpec& spec, const std::string& spec_key) {
  static std::mutex mu;
  static auto* known = new std::map<std::string, std::string>();
  std::lock_guard lock(mu);
  if (auto it = known->find(spec_key); it != known->end()) return it->second;
  RAYD_ASSIGN_OR_RETURN(std::string fingerprint, CacheFingerprint(spec));
  known->emplace(spec_key, fingerprint);
  return fingerprint;
}

// How often a reader that holds every chunk it needs still tells the cache it uses it.
constexpr auto kKeepAlive = std::chrono::seconds(5);

// The chunks of one fingerprint this process holds, viewed in shared memory (each view pins its
// object in the store), least recently used first out over `budget` bytes: a reader asks the
// node's cache only for the chunks it does not hold, so an epoch's blocks (each drawn from many
// chunks under a global shuffle) cost it a few calls, not one per chunk per block.
struct HeldChunks {
  std::mutex mu;
  std::optional<CacheShape> shape;
  struct Held {
    ObjectRef<std::vector<uint8_t>> ref;
    Block block;
    std::list<int64_t>::iterator used;
  };
  std::map<int64_t, Held> held;
  std::list<int64_t> used;  // least recently used first
  int64_t bytes = 0;
  int64_t budget = kDefaultCacheBytes;
  std::chrono::steady_clock::time_point last_call{};
};

HeldChunks& HeldChunksOf(const std::string& fingerprint) {
  static std::mutex mu;
  static auto* all = new std::map<std::string, std::unique_ptr<HeldChunks>>();
  std::lock_guard lock(mu);
  std::unique_ptr<HeldChunks>& entry = (*all)[fingerprint];
  if (!entry) entry = std::make_unique<HeldChunks>();
  return *entry;
}

// The blocks of chunks `ids` (ascending) for a reader, from those `h` holds and the node cache
// (asked for the others); `h.mu` held.
Result<std::vector<Block>> TakeChunks(HeldChunks& h, ActorHandle<RaydDataCache>& actor,
                                      const std::vector<int64_t>& ids, BlockCounts* counts) {
  std::vector<int64_t> missing;
  for (const int64_t id : ids) {
    if (!h.held.count(id)) missing.push_back(id);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!missing.empty() || now - h.last_call > kKeepAlive) {
    const std::shared_ptr<CachedChunks> got =
        rayd::Get(actor.Task(&RaydDataCache::Chunks).Remote(missing));
    h.last_call = now;
    counts->cache_made += got->made;
    counts->cache_hits += got->hits;
    for (size_t i = 0; i < missing.size(); ++i) {
      BlockCounts ignored;
      RAYD_ASSIGN_OR_RETURN(Block block, ViewPrefixed(got->blocks[i], &ignored));
      h.bytes += block.nbytes();
      h.held.emplace(missing[i], HeldChunks::Held{got->blocks[i], std::move(block),
                                                   h.used.insert(h.used.end(), missing[i])});
    }
  }
  counts->cache_hits += static_cast<int64_t>(ids.size() - missing.size());
  std::vector<Block> blocks;
  blocks.reserve(ids.size());
  for (const int64_t id : ids) {
    HeldChunks::Held& chunk = h.held.at(id);
    h.used.splice(h.used.end(), h.used, chunk.used);
    blocks.push_back(chunk.block);  // shares the view: it stays pinned while the gather reads it
  }
  // Over budget: the least recently used go (not those of this call: they were used last).
  while (h.bytes > h.budget && h.used.size() > ids.size()) {
    auto oldest = h.held.find(h.used.front());
    h.bytes -= oldest->second.block.nbytes();
    h.used.pop_front();
    h.held.erase(oldest);
  }
  return blocks;
}

}  // namespace

Result<Block> ReadThroughNodeCache(const DatasetSpec& spec, const std::string& spec_key,
                                   std::span<const int64_t> rows, BlockCounts* counts) {
  const std::string at = "datasets." + spec.name + ": cache: node: ";
  if (!rayd::IsInitialized()) {
    return Status::InvalidArgument(at + "the node's cache is a rayd actor: it needs rayd::Init "
                                        "(a trainer's ranks and a cluster's drivers have it)");
  }
  RAYD_ASSIGN_OR_RETURN(std::string fingerprint, FingerprintOf(spec, spec_key));
  HeldChunks& h = HeldChunksOf(fingerprint);
  std::string why;
  // A cache that has just exited (idle: its name may still be taken for a moment) or a name
  // taken by a racing reader: look again and start one, backing off, for about 3 s.
  for (int attempt = 0; attempt < 6; ++attempt) {
    if (attempt > 1) std::this_thread::sleep_for(std::chrono::milliseconds(200 << (attempt - 2)));
    try {
      ActorHandle<RaydDataCache> actor = NodeCacheActor(fingerprint, spec_key, attempt > 0);
      std::vector<Block> blocks;
      std::vector<std::pair<int32_t, int64_t>> where;
      {
        std::lock_guard lock(h.mu);
        h.budget = spec.options.value("cache_bytes", kDefaultCacheBytes);
        if (!h.shape) h.shape = *rayd::Get(actor.Task(&RaydDataCache::Shape).Remote());
        const int64_t chunk_rows = h.shape->chunk_rows;
        std::vector<int64_t> ids;
        ids.reserve(rows.size());
        for (const int64_t row : rows) {
          if (row < 0 || row >= h.shape->num_rows) {
            return Status::InvalidArgument(at + "row " + std::to_string(row) +
                                           " is out of the dataset's " +
                                           std::to_string(h.shape->num_rows));
          }
          ids.push_back(row / chunk_rows);
        }
        std::sort(ids.begin(), ids.end());
        ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
        RAYD_ASSIGN_OR_RETURN(blocks, TakeChunks(h, actor, ids, counts));
        where.reserve(rows.size());
        for (const int64_t row : rows) {
          const int64_t id = row / chunk_rows;
          const auto slot = std::lower_bound(ids.begin(), ids.end(), id) - ids.begin();
          where.emplace_back(static_cast<int32_t>(slot), row - id * chunk_rows);
        }
      }
      return Block::Gather(blocks, where);
    } catch (const RemoteError& e) {
      return Status::InvalidArgument(RemoteText(e));  // the read or a step failed there
    } catch (const std::exception& e) {
      why = RemoteText(e);
    }
  }
  return Status::Unavailable(at + "the node's cache did not answer: " + why);
}

Result<int64_t> NodeCacheRows(const DatasetSpec& spec, const std::string& spec_key) {
  BlockCounts counts;
  RAYD_RETURN_IF_ERROR(ReadThroughNodeCache(spec, spec_key, {}, &counts).status());
  RAYD_ASSIGN_OR_RETURN(std::string fingerprint, FingerprintOf(spec, spec_key));
  HeldChunks& h = HeldChunksOf(fingerprint);
  std::lock_guard lock(h.mu);
  return h.shape ? h.shape->num_rows : 0;
}

}  // namespace internal
}  // namespace rayd::data
