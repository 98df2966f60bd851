// DatasetShard and its passes (see shard.h for how they work).

#include <rayd/api.h>
#include <rayd/base/logging.h>
#include <rayd/data/order.h>
#include <rayd/data/shard.h>

#include "node_cache.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace rayd::data {
namespace {

using internal::BlockCounts;
using internal::Prefixed;
using internal::ViewPrefixed;

// Readers this process has open, by the dataset's spec: a producer thread or a data task reuses
// its reader across blocks (opening one scans CSV lines, inflates gzip files, ...). A few at
// most; Read holds the entry's lock (readers are single-threaded).
class ReaderCache {
 public:
  static ReaderCache& Get() {
    static ReaderCache* cache = new ReaderCache();  // used by tasks until the process exits
    return *cache;
  }
  struct Entry {
    std::string key;
    std::mutex mu;
    std::unique_ptr<Reader> reader;  // none when stage 0 reads through the node's cache
    std::vector<TransformStep> steps;
    std::vector<TransformStage> stages;  // PlanStages(steps): stage 0 runs with the read
  };
  Result<std::shared_ptr<Entry>> Open(const DatasetSpec& spec, const std::string& key) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if ((*it)->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return *entries_.begin();
      }
    }
    auto entry = std::make_shared<Entry>();
    entry->key = key;
    Result<std::vector<TransformStep>> steps =
        ParseTransforms(spec.options.value("transforms", nlohmann::json()));
    if (!steps.ok()) {
      return Status::InvalidArgument("datasets." + spec.name + "." + steps.status().message());
    }
    entry->steps = std::move(*steps);
    entry->stages = PlanStages(entry->steps);
    // With a cache step among the steps run with the read, the node's cache reads the files:
    // no reader here (a trial does not list a folder of a million images the cache has listed).
    if (!CacheStep(std::span<const TransformStep>(entry->steps).first(entry->stages[0].end))) {
      RAYD_ASSIGN_OR_RETURN(entry->reader, OpenReader(spec));
    }
    entries_.push_front(entry);
    if (entries_.size() > 8) entries_.pop_back();
    return entry;
  }

 private:
  std::mutex mu_;
  std::list<std::shared_ptr<Entry>> entries_;  // most recently used first
};

std::string SpecKey(const DatasetSpec& spec) {
  return nlohmann::json{{"name", spec.name}, {"format", spec.format}, {"paths", spec.paths},
                        {"options", spec.options}}
      .dump();
}

Result<DatasetSpec> SpecFromKey(const std::string& key) {
  nlohmann::json j = nlohmann::json::parse(key, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("a data task got a malformed dataset spec");
  DatasetSpec spec;
  spec.name = j.value("name", "");
  spec.format = j.value("format", "");
  spec.paths = j.value("paths", std::vector<std::string>());
  spec.options = j.value("options", nlohmann::json::object());
  return spec;
}

Status InDataset(const DatasetSpec& spec, const Status& status) {
  return Status(status.code(), "datasets." + spec.name + ": " + status.message());
}

// Reads `rows` and applies the steps of stage 0 (the ones that run with the read) for epoch
// `epoch`: with a cache step among them, the rows come from the node's cache with the steps
// before it applied (node_cache.h: made once for every epoch), and only the steps after it run
// here.
Result<Block> ReadAndTransform(const DatasetSpec& spec, const std::string& key,
                               std::span<const int64_t> rows, int64_t epoch, BlockCounts* counts) {
  RAYD_ASSIGN_OR_RETURN(std::shared_ptr<ReaderCache::Entry> entry,
                        ReaderCache::Get().Open(spec, key));
  const std::span<const TransformStep> stage0 =
      std::span<const TransformStep>(entry->steps).first(entry->stages[0].end);
  const std::optional<size_t> cache = CacheStep(stage0);
  Result<Block> block = Status::Internal("unread");
  if (cache) {
    block = internal::ReadThroughNodeCache(spec, key, rows, counts);
    if (!block.ok()) return block.status();
  } else {
    std::lock_guard lock(entry->mu);
    const int64_t skipped_before = entry->reader->skipped_rows();
    block = entry->reader->Read(rows);
    counts->skipped += entry->reader->skipped_rows() - skipped_before;
    if (!block.ok()) return InDataset(spec, block.status());
  }
  Result<Block> out =
      ApplyTransforms(stage0.subspan(cache ? *cache + 1 : 0), std::move(*block), nullptr, epoch);
  if (!out.ok()) return InDataset(spec, out.status());
  return out;
}

// The steps [begin, end) of a dataset's transforms, parsed again where a later stage runs.
Result<std::vector<TransformStep>> StageSteps(const DatasetSpec& spec, int64_t begin,
                                              int64_t end) {
  Result<std::vector<TransformStep>> steps =
      ParseTransforms(spec.options.value("transforms", nlohmann::json()));
  if (!steps.ok()) return InDataset(spec, steps.status());
  if (begin < 0 || end < begin || end > static_cast<int64_t>(steps->size())) {
    return Status::Internal("datasets." + spec.name + ": a data stage of steps out of range");
  }
  return std::vector<TransformStep>(steps->begin() + begin, steps->begin() + end);
}

// Applies a later stage's steps to the block at `input`, of epoch `epoch`; the result, prefixed
// with the input's skip count. Throws RaydError with the step's message.
std::vector<uint8_t> ApplyStage(const DatasetSpec& spec, std::span<const TransformStep> steps,
                                BatchMapper* mapper,
                                const ObjectRef<std::vector<uint8_t>>& input, int64_t epoch) {
  BlockCounts counts;
  Result<Block> block = ViewPrefixed(input, &counts);
  if (!block.ok()) throw RaydError(block.status().message());
  Result<Block> out = ApplyTransforms(steps, std::move(*block), mapper, epoch);
  if (!out.ok()) throw RaydError(InDataset(spec, out.status()).message());
  return Prefixed(*out, counts);
}

}  // namespace

// The data task: makes one block of epoch `epoch` (the read and stage 0) wherever rayd placed
// it. Throws (a RemoteError for the caller) with the reader's or transform's message.
std::vector<uint8_t> RaydDataMakeBlock(std::string spec_key, std::vector<int64_t> rows,
                                       int64_t epoch) {
  Result<DatasetSpec> spec = SpecFromKey(spec_key);
  if (!spec.ok()) throw RaydError(spec.status().message());
  BlockCounts counts;
  Result<Block> block = ReadAndTransform(*spec, spec_key, rows, epoch, &counts);
  if (!block.ok()) throw RaydError(block.status().message());
  return Prefixed(*block, counts);
}

// A later stage of plain steps with a placement of their own, as a task.
std::vector<uint8_t> RaydDataApplyStage(std::string spec_key, int64_t begin, int64_t end,
                                        ObjectRef<std::vector<uint8_t>> input, int64_t epoch) {
  Result<DatasetSpec> spec = SpecFromKey(spec_key);
  if (!spec.ok()) throw RaydError(spec.status().message());
  Result<std::vector<TransformStep>> steps = StageSteps(*spec, begin, end);
  if (!steps.ok()) throw RaydError(steps.status().message());
  return ApplyStage(*spec, *steps, nullptr, input, epoch);
}
RAYD_REMOTE(RaydDataMakeBlock, RaydDataApplyStage);

// One actor of a stateful map's pool: the map's instance, made once, and the plain steps after
// it, applied to one block per call.
class RaydDataMapper {
 public:
  // Throws RaydError with the constructor's message: the pool's start reports it.
  static RaydDataMapper* FactoryCreate(std::string spec_key, int64_t begin, int64_t end) {
    Result<DatasetSpec> spec = SpecFromKey(spec_key);
    if (!spec.ok()) throw RaydError(spec.status().message());
    Result<std::vector<TransformStep>> steps = StageSteps(*spec, begin, end);
    if (!steps.ok()) throw RaydError(steps.status().message());
    Result<std::unique_ptr<BatchMapper>> mapper = MakeBatchMapper(steps->front());
    if (!mapper.ok()) throw RaydError(InDataset(*spec, mapper.status()).message());
    return new RaydDataMapper(std::move(*spec), std::move(*steps), std::move(*mapper));
  }
  int64_t Ready() { return 0; }
  std::vector<uint8_t> Apply(ObjectRef<std::vector<uint8_t>> input, int64_t epoch) {
    return ApplyStage(spec_, steps_, mapper_.get(), input, epoch);
  }

 private:
  RaydDataMapper(DatasetSpec spec, std::vector<TransformStep> steps,
                 std::unique_ptr<BatchMapper> mapper)
      : spec_(std::move(spec)), steps_(std::move(steps)), mapper_(std::move(mapper)) {}
  const DatasetSpec spec_;
  const std::vector<TransformStep> steps_;
  std::unique_ptr<BatchMapper> mapper_;
};
RAYD_REMOTE(RaydDataMapper::FactoryCreate, &RaydDataMapper::Ready, &RaydDataMapper::Apply);

namespace {

// An error from a task or actor as one line: the remote message, else what rayd said.
std::string RemoteMessage(const std::exception& e) {
  const auto* remote = dynamic_cast<const RemoteError*>(&e);
  std::string m = remote != nullptr ? remote->remote_message() : std::string(e.what());
  return m.substr(0, m.find('\n'));
}

}  // namespace

// The stages after the first, as a shard runs them: each stateful map's pool of actors, started
// when the shard opens and killed with it. Calls go round-robin.
class DataStages {
 public:
  DataStages(std::string spec_json, std::string name, std::vector<TransformStage> stages)
      : spec_json_(std::move(spec_json)), name_(std::move(name)), stages_(std::move(stages)) {}
  DataStages(const DataStages&) = delete;
  DataStages& operator=(const DataStages&) = delete;
  ~DataStages() {
    for (const auto& pool : pools_) {
      for (const ActorHandle<RaydDataMapper>& actor : pool) {
        try {
          actor.Kill();
        } catch (const std::exception&) {
          // Already gone: nothing to free.
        }
      }
    }
  }

  // Starts every pool and waits until each actor has built its instance.
  Status Start() {
    pools_.resize(stages_.size());
    for (size_t s = 1; s < stages_.size(); ++s) {
      const TransformStage& stage = stages_[s];
      if (!stage.actors) continue;
      for (int i = 0; i < stage.placement.concurrency; ++i) {
        pools_[s].push_back(rayd::Actor(RaydDataMapper::FactoryCreate)
                                .SetResources(stage.placement.resources)
                                .SetLabelSelector(stage.placement.label_selector)
                                .Remote(spec_json_, static_cast<int64_t>(stage.begin),
                                        static_cast<int64_t>(stage.end)));
      }
    }
    for (size_t s = 1; s < stages_.size(); ++s) {
      for (size_t i = 0; i < pools_[s].size(); ++i) {
        try {
          rayd::Get(pools_[s][i].Task(&RaydDataMapper::Ready).Remote());
        } catch (const std::exception& e) {
          return Status::InvalidArgument(Where(s) + ": actor " + std::to_string(i) +
                                         " of its pool did not start: " + RemoteMessage(e));
        }
      }
    }
    return Status::Ok();
  }

  // The stages after the first applied to the block at `ref` of epoch `epoch`, one call each
  // (not waited for).
  ObjectRef<std::vector<uint8_t>> Submit(ObjectRef<std::vector<uint8_t>> ref, int64_t epoch) {
    for (size_t s = 1; s < stages_.size(); ++s) {
      const TransformStage& stage = stages_[s];
      if (stage.actors) {
        const auto& pool = pools_[s];
        ref = pool[next_.fetch_add(1) % pool.size()]
                  .Task(&RaydDataMapper::Apply)
                  .Remote(ref, epoch);
      } else {
        ref = rayd::Task(RaydDataApplyStage)
                  .SetResources(stage.placement.resources)
                  .SetLabelSelector(stage.placement.label_selector)
                  .Remote(spec_json_, static_cast<int64_t>(stage.begin),
                          static_cast<int64_t>(stage.end), ref, epoch);
      }
    }
    return ref;
  }

  std::string Where(size_t stage) const {
    return "datasets." + name_ + "." + stages_[stage].where;
  }

 private:
  const std::string spec_json_;
  const std::string name_;
  const std::vector<TransformStage> stages_;
  std::vector<std::vector<ActorHandle<RaydDataMapper>>> pools_;  // by stage; empty for tasks
  std::atomic<size_t> next_{0};  // round-robin over the pools
};

namespace internal {

// The rows one pass deals, in the order it deals them (rayd/data/order.h deals them to the
// ranks): a resumed epoch's pending rows, then the epoch's order from the cursor.
struct PassOrder {
  int64_t epoch = 0;
  int64_t start = 0;    // the cursor the pass started at
  int64_t pending = 0;  // how many of `rows` are the resumed position's pending rows
  std::vector<int64_t> rows;

  // The position once the first `dealt` rows are dealt, of which `undrawn` (indices into `rows`,
  // ascending) no batch has taken yet.
  ShardPosition After(int64_t dealt, std::span<const int64_t> undrawn = {}) const {
    ShardPosition p{.epoch = epoch, .cursor = start + std::max<int64_t>(dealt - pending, 0)};
    p.pending.reserve(undrawn.size() + static_cast<size_t>(std::max<int64_t>(pending - dealt, 0)));
    for (const int64_t i : undrawn) p.pending.push_back(rows[static_cast<size_t>(i)]);
    for (int64_t i = dealt; i < pending; ++i) p.pending.push_back(rows[static_cast<size_t>(i)]);
    return p;
  }
};

// A local shuffle buffer's draws (BatchOptions::local_shuffle_buffer_size), over one rank's
// rows of a pass: the rows come into the buffer a step at a time while it holds fewer than
// buffer + batch_size, and each draw takes as many as the next step dealt, at random (a partial
// Fisher-Yates from the back over SplitMix64). So every rank makes the same number of steps,
// and the draws are a function of the deal and the seed alone: a pass reads its rows in the
// order they will be drawn (no copy of a buffer; what the producer makes ahead is what the loop
// takes), and any rank can replay every rank's buffer (RankDraws) to tell which rows dealt so far
// no batch has taken yet.
class RankBuffer {
 public:
  RankBuffer(const PassOrder& order, int world, int rank, int64_t batch_size, bool drop_last,
             int64_t buffer, uint64_t seed)
      : rows_(static_cast<int64_t>(order.rows.size())),
        world_(world),
        rank_(rank),
        batch_size_(batch_size),
        drop_last_(drop_last),
        fill_(buffer + batch_size),
        steps_(StepCount(rows_, world, batch_size, drop_last)),
        random_(seed) {}

  bool done() const { return drawn_steps_ == steps_; }
  int64_t pulled() const { return pulled_; }
  int64_t steps() const { return steps_; }
  const std::vector<int64_t>& held() const { return held_; }
  StepRows Step(int64_t step) const {
    return RankStepRows(rows_, world_, rank_, batch_size_, drop_last_, step);
  }

  // The next step's draw (not done()): indices into the pass's rows, appended to `out` (null:
  // only taken out of the buffer, as a replay of another rank needs).
  void Draw(std::vector<int64_t>* out) {
    while (static_cast<int64_t>(held_.size()) < fill_ && pulled_ < steps_) {
      const StepRows step = Step(pulled_++);
      for (int64_t i = 0; i < step.count; ++i) held_.push_back(step.first + i);
    }
    const int64_t n = Step(drawn_steps_++).count;
    for (int64_t i = 0; i < n && !held_.empty(); ++i) {
      std::swap(held_[random_.Below(held_.size())], held_.back());
      if (out != nullptr) out->push_back(held_.back());
      held_.pop_back();
    }
  }

 private:
  const int64_t rows_;
  const int world_;
  const int rank_;
  const int64_t batch_size_;
  const bool drop_last_;
  const int64_t fill_;
  const int64_t steps_;
  SplitMix64 random_;
  int64_t pulled_ = 0;       // steps read into the buffer
  int64_t drawn_steps_ = 0;  // steps drawn
  std::vector<int64_t> held_;
};

uint64_t ShuffleSeed(uint64_t seed, int64_t epoch, int rank) {
  return seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) + 1) * 0xC2B2AE3D27D4EB4Full ^
         (static_cast<uint64_t>(rank) + 1) * 0x165667B19E3779F9ull;
}

// Every rank's local shuffle buffer over one pass, replayed a step at a time as the loop takes
// its steps: the position's pending rows (those dealt up to the furthest rank's read-ahead, less
// those drawn).
class RankDraws {
 public:
  RankDraws(std::shared_ptr<const PassOrder> order, int world, int64_t batch_size, bool drop_last,
            int64_t buffer, uint64_t seed)
      : order_(std::move(order)), batch_size_(batch_size), drop_last_(drop_last) {
    for (int r = 0; r < world; ++r) {
      ranks_.emplace_back(*order_, world, r, batch_size, drop_last, buffer,
                          ShuffleSeed(seed, order_->epoch, r));
    }
  }

  // Every rank's next step.
  void Advance() {
    std::lock_guard lock(mu_);
    for (RankBuffer& rank : ranks_) {
      if (!rank.done()) rank.Draw(nullptr);
    }
  }

  ShardPosition Position() const {
    std::lock_guard lock(mu_);
    int64_t pulled = 0;
    for (const RankBuffer& rank : ranks_) pulled = std::max(pulled, rank.pulled());
    std::vector<int64_t> undrawn;
    for (const RankBuffer& rank : ranks_) {
      undrawn.insert(undrawn.end(), rank.held().begin(), rank.held().end());
      for (int64_t s = rank.pulled(); s < pulled; ++s) {  // dealt to it, not in its buffer yet
        const StepRows step = rank.Step(s);
        for (int64_t i = 0; i < step.count; ++i) undrawn.push_back(step.first + i);
      }
    }
    std::sort(undrawn.begin(), undrawn.end());
    const int64_t rows = static_cast<int64_t>(order_->rows.size());
    const int world = static_cast<int>(ranks_.size());
    const int64_t dealt = pulled == ranks_.front().steps()
                              ? rows
                              : RowsAfterSteps(rows, world, batch_size_, drop_last_, pulled);
    return order_->After(dealt, undrawn);
  }

 private:
  const std::shared_ptr<const PassOrder> order_;
  const int64_t batch_size_;
  const bool drop_last_;
  mutable std::mutex mu_;
  std::vector<RankBuffer> ranks_;  // guarded by mu_
};

}  // namespace internal

using internal::PassOrder;
using internal::RankBuffer;
using internal::RankDraws;
using internal::ShuffleSeed;

struct DatasetShard::Counters {
  std::atomic<int64_t> wait_ns{0}, blocks{0}, rows{0}, bytes{0}, skipped{0}, peak_held{0};
  std::atomic<int64_t> held_blocks{0}, held_bytes{0};  // the current pass's, now
  std::atomic<int64_t> cache_made{0}, cache_hits{0};

  // Where the last pass stands (position()): its rows and how many its steps handed out dealt,
  // or, with a local shuffle buffer, what every rank's draws say; before any pass, or after
  // ResumeAt, `fixed`.
  ShardPosition Position() {
    std::lock_guard lock(position_mu);
    if (drawn) return drawn();
    return pass ? pass->After(dealt) : fixed;
  }
  void StartPass(std::shared_ptr<const PassOrder> order) {
    std::lock_guard lock(position_mu);
    pass = std::move(order);
    dealt = 0;
    drawn = nullptr;
  }
  void Dealt(int64_t rows) {
    std::lock_guard lock(position_mu);
    dealt = rows;
  }
  void Drawn(std::function<ShardPosition()> from) {
    std::lock_guard lock(position_mu);
    drawn = std::move(from);
  }
  void Fix(ShardPosition position) {
    std::lock_guard lock(position_mu);
    fixed = std::move(position);
    pass.reset();
    drawn = nullptr;
  }

  std::mutex position_mu;
  ShardPosition fixed;                    // guarded by position_mu
  std::shared_ptr<const PassOrder> pass;  // guarded by position_mu
  int64_t dealt = 0;                      // guarded by position_mu
  std::function<ShardPosition()> drawn;   // guarded by position_mu
};

DatasetShard::~DatasetShard() = default;

Result<std::unique_ptr<DatasetShard>> DatasetShard::Open(const DatasetSpec& spec,
                                                        ShardOptions options) {
  std::unique_ptr<DatasetShard> shard(new DatasetShard());
  shard->spec_ = spec;
  shard->options_ = options;
  shard->counters_ = std::make_shared<Counters>();
  const std::string prefix = "datasets." + spec.name + ".";
  const nlohmann::json& o = spec.options;
  auto bad = [&](const std::string& key, const std::string& want) {
    return Status::InvalidArgument(prefix + key + ": expected " + want);
  };
  if (o.contains("shuffle")) {
    if (!o["shuffle"].is_boolean()) return bad("shuffle", "true or false");
    shard->shuffle_ = o["shuffle"].get<bool>();
  }
  if (o.contains("seed")) {
    if (!o["seed"].is_number_integer()) return bad("seed", "an integer");
    shard->options_.seed = o["seed"].get<uint64_t>();
  }
  if (o.contains("execution")) {
    const std::string e = o["execution"].is_string() ? o["execution"].get<std::string>() : "";
    if (e != "local" && e != "tasks") return bad("execution", "local or tasks");
    shard->tasks_ = e == "tasks";
  }
  for (const char* key : {"resources", "label_selector"}) {
    if (o.contains(key) && !o[key].is_object()) return bad(key, "a map");
  }
  if (o.contains("prefetch_blocks")) {
    if (!o["prefetch_blocks"].is_number_integer() || o["prefetch_blocks"].get<int>() < 1) {
      return bad("prefetch_blocks", "an integer of at least 1");
    }
    shard->prefetch_blocks_ = o["prefetch_blocks"].get<int>();
  }
  for (const auto& [key, field] :
       {std::pair{"block_bytes", &shard->block_bytes_}, {"budget_bytes", &options.budget_bytes}}) {
    if (!o.contains(key)) continue;
    if (!o[key].is_number_integer() || o[key].get<int64_t>() < 1) {
      return bad(key, "a byte count of at least 1");
    }
    *field = o[key].get<int64_t>();
  }
  shard->options_.budget_bytes = options.budget_bytes;
  // The node cache's own (node_cache.h), checked here where the error can name them.
  if (o.contains("cache_bytes") &&
      (!o["cache_bytes"].is_number_integer() || o["cache_bytes"].get<int64_t>() < 1)) {
    return bad("cache_bytes", "a byte count of at least 1");
  }
  if (o.contains("cache_idle_s") &&
      (!o["cache_idle_s"].is_number() || o["cache_idle_s"].get<double>() <= 0)) {
    return bad("cache_idle_s", "seconds, more than 0");
  }
  shard->spec_json_ = SpecKey(spec);

  // Open here too (the reader's errors come now, not at the first batch), learn the rows and
  // what one row makes.
  RAYD_ASSIGN_OR_RETURN(std::shared_ptr<ReaderCache::Entry> entry,
                        ReaderCache::Get().Open(spec, shard->spec_json_));
  if (CacheStep(entry->steps) && o.value("on_error", nlohmann::json()) == "skip") {
    return bad("on_error", "no skip with {cache: node}: the cache keeps every row in place, so it "
                           "cannot leave bad ones out");
  }
  std::optional<Block> first_block;  // the first row after stage 0
  const std::span<const TransformStep> stage0 =
      std::span<const TransformStep>(entry->steps).first(entry->stages[0].end);
  const bool cached = CacheStep(stage0).has_value();
  {
    std::lock_guard lock(entry->mu);
    if (cached) {
      RAYD_ASSIGN_OR_RETURN(shard->num_rows_, internal::NodeCacheRows(spec, shard->spec_json_));
    } else {
      shard->num_rows_ = entry->reader->num_rows();
      shard->schema_ = entry->reader->schema();
    }
    if (o.contains("rows")) {
      const nlohmann::json& r = o["rows"];
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() ||
          !r[1].is_number_integer() || r[0].get<int64_t>() < 0 ||
          r[1].get<int64_t>() < r[0].get<int64_t>() || r[1].get<int64_t>() > shard->num_rows_) {
        return bad("rows", "[BEGIN, END] with 0 <= BEGIN <= END <= " +
                               std::to_string(shard->num_rows_) + " (the dataset's rows)");
      }
      shard->first_row_ = r[0].get<int64_t>();
      shard->num_rows_ = r[1].get<int64_t>() - shard->first_row_;
    }
    const int64_t limit = ParseLimit(o.value("transforms", nlohmann::json()));
    if (limit >= 0) shard->num_rows_ = std::min(shard->num_rows_, limit);
    const int64_t first = shard->first_row_;
    if (shard->num_rows_ > 0 && cached) {
      // Through the node's cache: its steps run once per node. The rows it hands over are the
      // ones blocks are cut by.
      BlockCounts counts;
      RAYD_ASSIGN_OR_RETURN(Block out,
                            ReadAndTransform(spec, shard->spec_json_, {&first, 1}, -1, &counts));
      shard->row_bytes_ = std::max<int64_t>(out.nbytes(), 1);
      shard->counters_->cache_made += counts.cache_made;
      shard->counters_->cache_hits += counts.cache_hits;
      shard->schema_ = out.schema();
      first_block = std::move(out);
    } else if (shard->num_rows_ > 0) {
      Result<Block> row = entry->reader->Read({&first, 1});
      if (row.ok() && row->num_rows() == 1) {
        shard->row_bytes_ = std::max<int64_t>(row->nbytes(), 1);
        Result<Block> out = ApplyTransforms(stage0, std::move(*row));
        if (!out.ok()) {
          return Status(out.status().code(), prefix + "transforms: " + out.status().message());
        }
        shard->schema_ = out->schema();
        first_block = std::move(*out);
      }
    }
  }
  if (entry->stages.size() > 1) RAYD_RETURN_IF_ERROR(shard->StartStages(entry->stages, first_block));
  return shard;
}

// The later stages' pools start now (a constructor's error comes here, not at the first batch),
// and the first row goes through every stage for the batches' schema.
Status DatasetShard::StartStages(const std::vector<TransformStage>& stages,
                                 const std::optional<Block>& first_row) {
  stages_ = std::make_shared<DataStages>(spec_json_, spec_.name, stages);
  const std::string where = stages_->Where(1);
  if (!rayd::IsInitialized()) {
    return Status::InvalidArgument(where + " runs as rayd tasks or actors: it needs rayd::Init "
                                      "(a trainer's ranks and a cluster's drivers have it)");
  }
  RAYD_RETURN_IF_ERROR(stages_->Start());
  if (!first_row) return Status::Ok();
  try {
    BlockCounts counts;
    RAYD_ASSIGN_OR_RETURN(Block block,
                          ViewPrefixed(stages_->Submit(rayd::Put(Prefixed(*first_row, {})), -1), &counts));
    schema_ = block.schema();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(where + ": " + RemoteMessage(e));
  }
  return Status::Ok();
}

int64_t DatasetShard::rows_per_epoch() const {
  return RowsPerRank(num_rows_, options_.world_size);
}

ShardStats DatasetShard::stats() const {
  ShardStats s;
  s.wait_seconds = counters_->wait_ns.load() / 1e9;
  s.blocks = counters_->blocks.load();
  s.rows = counters_->rows.load();
  s.bytes = counters_->bytes.load();
  s.skipped_rows = counters_->skipped.load();
  s.peak_held_bytes = counters_->peak_held.load();
  s.held_blocks = counters_->held_blocks.load();
  s.held_bytes = counters_->held_bytes.load();
  s.cache_chunks_made = counters_->cache_made.load();
  s.cache_chunks_hit = counters_->cache_hits.load();
  return s;
}

// One pass: the producer thread and the queue of blocks it made.
class ShardPass : public BatchIterator {
 public:
  // `draws`: every rank's local shuffle buffer (null without one); this rank reads its rows in
  // the order its buffer draws them.
  ShardPass(const DatasetShard& shard, const BatchOptions& options,
            std::shared_ptr<const PassOrder> order, std::shared_ptr<RankDraws> draws)
      : spec_(shard.spec_),
        spec_json_(shard.spec_json_),
        tasks_(shard.tasks_),
        prefetch_(shard.prefetch_blocks_),
        budget_(shard.options_.budget_bytes),
        batch_size_(std::max<int64_t>(options.batch_size, 1)),
        drop_last_(options.drop_last),
        counters_(shard.counters_),
        stages_(shard.stages_),
        world_(shard.options_.world_size),
        order_(std::move(order)),
        draws_(std::move(draws)) {
    left_ = static_cast<int64_t>(order_->rows.size());
    const int rank = shard.options_.rank;
    RankShare share = DealRank(order_->rows, world_, rank, batch_size_, drop_last_);
    if (draws_) {
      RankBuffer buffer(*order_, world_, rank, batch_size_, drop_last_,
                        options.local_shuffle_buffer_size,
                        ShuffleSeed(shard.options_.seed, order_->epoch, rank));
      std::vector<int64_t> drawn;
      drawn.reserve(share.rows.size());
      while (!buffer.done()) buffer.Draw(&drawn);
      RAYD_CHECK_MSG(drawn.size() == share.rows.size(),
                     "a local shuffle drew another count of rows");
      for (size_t i = 0; i < drawn.size(); ++i) share.rows[i] = order_->rows[drawn[i]];
    }
    rows_ = std::move(share.rows);
    steps_ = std::move(share.steps);
    for (int64_t& row : rows_) row += shard.first_row_;
    // Blocks of whole steps, about block_bytes each, but the first ones: one step's, then
    // each at most twice the one before, so that the loop's first batch of a pass (each pass
    // starts its producer afresh) waits only for the rows it needs, and the producer, making
    // each block while the loop takes the one before, stays ahead of it from there on instead
    // of owing it a whole block's worth of reading at the second.
    const int64_t per_block = std::max(batch_size_, shard.block_bytes_ / shard.row_bytes_);
    for (size_t s = 0, at = 0; s < steps_.size();) {
      const size_t first = s;
      const int64_t limit =
          cuts_.empty() ? 0 : std::min(per_block, 2 * (cuts_.back().second - cuts_.back().first));
      int64_t rows = 0;
      while (s < steps_.size() && (rows == 0 || rows + steps_[s] <= limit)) rows += steps_[s++];
      cuts_.emplace_back(at, at + rows);
      block_steps_.emplace_back(first, s);
      at += rows;
    }
    counters_->StartPass(order_);
    row_bytes_ = shard.row_bytes_;
    estimated_.assign(cuts_.size(), 0);
    if (tasks_) {
      const nlohmann::json resources = spec_.options.value("resources", nlohmann::json::object());
      for (const auto& [k, v] : resources.items()) {
        if (v.is_number()) resources_[k] = v.get<double>();
      }
      const nlohmann::json labels =
          spec_.options.value("label_selector", nlohmann::json::object());
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string()) labels_[k] = v.get<std::string>();
      }
      // By default a data task reserves nothing (Ray's num_cpus=0): a gang that holds every
      // CPU of its nodes must not wait forever for its own preprocessing.
      if (resources_.empty()) resources_["CPU"] = 0;
    }
    producer_ = std::thread([this] { Produce(); });
  }

  ~ShardPass() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    producer_.join();
    // What the loop never took is no longer held.
    counters_->held_blocks -= held_blocks_;
    counters_->held_bytes -= held_bytes_;
  }

  Result<std::optional<Block>> Next() override {
    while (!current_ || step_ == block_steps_[next_block_ - 1].second) {
      current_.reset();
      offset_ = 0;
      if (next_block_ == cuts_.size()) return std::optional<Block>();
      const auto start = std::chrono::steady_clock::now();
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&] { return !ready_.empty(); });
      counters_->wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
      Result<Block> block = std::move(ready_.front());
      ready_.pop_front();
      held_bytes_ -= estimated_[next_block_];
      --held_blocks_;
      counters_->held_blocks -= 1;
      counters_->held_bytes -= estimated_[next_block_];
      ++next_block_;
      lock.unlock();
      changed_.notify_all();
      if (!block.ok()) {
        next_block_ = cuts_.size();  // the pass is over
        return block.status();
      }
      current_ = std::move(*block);
    }
    // One step's batch. A filter may have left the block fewer rows than its steps dealt: they
    // are split evenly over its steps, so that every rank still makes the same number of steps.
    const auto [first, last] = block_steps_[next_block_ - 1];
    const auto [begin, end] = cuts_[next_block_ - 1];
    int64_t to = offset_ + steps_[step_];
    if (current_->num_rows() != end - begin) {
      to = current_->num_rows() * static_cast<int64_t>(step_ + 1 - first) /
           static_cast<int64_t>(last - first);
    }
    Block batch = current_->Slice(offset_, to);
    offset_ = to;
    ++step_;
    // Where the epoch stands once this batch is trained on: the rows the steps so far dealt,
    // over every rank (all of them after the last step).
    counters_->Dealt(step_ == steps_.size() ? left_
                                            : RowsAfterSteps(left_, world_, batch_size_, drop_last_,
                                                             static_cast<int64_t>(step_)));
    if (draws_) draws_->Advance();
    return std::optional<Block>(std::move(batch));
  }

 private:
  std::span<const int64_t> RowsOf(size_t block) const {
    return std::span<const int64_t>(rows_).subspan(
        static_cast<size_t>(cuts_[block].first),
        static_cast<size_t>(cuts_[block].second - cuts_[block].first));
  }

  // Waits until block `block` may be started (backpressure); false when stopping.
  bool WaitForRoom(size_t block, size_t in_flight) {
    const int64_t bytes = (cuts_[block].second - cuts_[block].first) * row_bytes_;
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] {
      const size_t held = ready_.size() + in_flight;
      return stop_ || held == 0 ||
             (held < static_cast<size_t>(prefetch_) && held_bytes_ + bytes <= budget_);
    });
    if (stop_) return false;
    held_bytes_ += bytes;
    ++held_blocks_;
    counters_->held_blocks += 1;
    counters_->held_bytes += bytes;
    estimated_[block] = bytes;
    if (held_bytes_ > counters_->peak_held) counters_->peak_held = held_bytes_;
    return true;
  }

  void Deliver(Result<Block> block) {
    if (block.ok()) {
      counters_->blocks += 1;
      counters_->rows += block->num_rows();
      counters_->bytes += block->nbytes();
    }
    {
      std::lock_guard lock(mu_);
      ready_.push_back(std::move(block));
    }
    changed_.notify_all();
  }

  void Produce() {
    if (!tasks_ && stages_ == nullptr) {
      for (size_t b = 0; b < cuts_.size(); ++b) {
        if (!WaitForRoom(b, 0)) return;
        BlockCounts counts;
        Result<Block> block = ReadAndTransform(spec_, spec_json_, RowsOf(b), order_->epoch, &counts);
        Count(counts);
        const bool failed = !block.ok();
        Deliver(std::move(block));
        if (failed) return;
      }
      return;
    }
    std::deque<ObjectRef<std::vector<uint8_t>>> in_flight;
    size_t submitted = 0;
    for (size_t collected = 0; collected < cuts_.size();) {
      while (submitted < cuts_.size() && (in_flight.empty() || HasRoom(submitted, in_flight.size()))) {
        if (!WaitForRoom(submitted, in_flight.size())) return;
        Result<ObjectRef<std::vector<uint8_t>>> ref = Submit(submitted);
        if (!ref.ok()) {
          Deliver(ref.status());
          return;
        }
        in_flight.push_back(std::move(*ref));
        ++submitted;
      }
      Result<Block> block = Collect(in_flight.front());
      in_flight.pop_front();
      ++collected;
      const bool failed = !block.ok();
      Deliver(std::move(block));
      if (failed) return;
    }
  }

  // Block `b`'s stages, started: the read and stage 0 as a task (or here, then put in the
  // object store), the later stages as their tasks and actor calls.
  Result<ObjectRef<std::vector<uint8_t>>> Submit(size_t b) {
    const std::span<const int64_t> rows = RowsOf(b);
    ObjectRef<std::vector<uint8_t>> ref;
    if (tasks_) {
      ref = rayd::Task(RaydDataMakeBlock)
                .SetResources(resources_)
                .SetLabelSelector(labels_)
                .Remote(spec_json_, std::vector<int64_t>(rows.begin(), rows.end()), order_->epoch);
    } else {
      BlockCounts counts;
      RAYD_ASSIGN_OR_RETURN(Block block,
                            ReadAndTransform(spec_, spec_json_, rows, order_->epoch, &counts));
      ref = rayd::Put(Prefixed(block, counts));
    }
    return stages_ == nullptr ? ref : stages_->Submit(std::move(ref), order_->epoch);
  }

  void Count(const BlockCounts& counts) {
    counters_->skipped += counts.skipped;
    counters_->cache_made += counts.cache_made;
    counters_->cache_hits += counts.cache_hits;
  }

  bool HasRoom(size_t block, size_t in_flight) {
    const int64_t bytes = (cuts_[block].second - cuts_[block].first) * row_bytes_;
    std::lock_guard lock(mu_);
    const size_t held = ready_.size() + in_flight;
    return held < static_cast<size_t>(prefetch_) && held_bytes_ + bytes <= budget_;
  }

  // The block its last stage made, viewed where the object store holds it.
  Result<Block> Collect(const ObjectRef<std::vector<uint8_t>>& ref) {
    try {
      BlockCounts counts;
      Result<Block> block = ViewPrefixed(ref, &counts);
      Count(counts);
      return block;
    } catch (const std::exception& e) {
      return Status::Unavailable("datasets." + spec_.name + ": a data task failed: " +
                                 RemoteMessage(e));
    }
  }

  const DatasetSpec spec_;
  const std::string spec_json_;
  const bool tasks_;
  const int prefetch_;
  const int64_t budget_;
  const int64_t batch_size_;
  const bool drop_last_;
  std::shared_ptr<DatasetShard::Counters> counters_;
  std::shared_ptr<DataStages> stages_;
  std::map<std::string, double> resources_;
  std::map<std::string, std::string> labels_;
  std::vector<int64_t> rows_;
  std::vector<std::pair<int64_t, int64_t>> cuts_;  // each block's [begin, end) in rows_
  std::vector<int64_t> steps_;                     // each step's batch size
  std::vector<std::pair<size_t, size_t>> block_steps_;  // each block's [first, last) step
  const int world_;
  const std::shared_ptr<const PassOrder> order_;
  const std::shared_ptr<RankDraws> draws_;
  int64_t left_ = 0;  // the rows the pass deals
  int64_t row_bytes_ = 1;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Result<Block>> ready_;  // guarded by mu_: made, not yet taken, in block order
  int64_t held_bytes_ = 0;           // guarded by mu_: estimated bytes made or in flight
  int64_t held_blocks_ = 0;          // guarded by mu_: blocks made or in flight, not taken
  std::vector<int64_t> estimated_;   // guarded by mu_: each started block's estimate
  bool stop_ = false;                // guarded by mu_

  // The loop's side.
  size_t next_block_ = 0;
  size_t step_ = 0;  // steps handed out
  std::optional<Block> current_;
  int64_t offset_ = 0;

  std::thread producer_;  // last: started once everything above is set
};

ShardPosition DatasetShard::position() const { return counters_->Position(); }

void DatasetShard::ResumeAt(ShardPosition position) {
  std::erase_if(position.pending, [&](int64_t row) { return row < 0 || row >= num_rows_; });
  position.cursor = std::clamp<int64_t>(position.cursor, 0, num_rows_);
  if (position.cursor == num_rows_ && position.pending.empty()) {  // the epoch was done
    next_epoch_ = position.epoch + 1;
    resume_.reset();
  } else {
    next_epoch_ = position.epoch;
    resume_ = position;
  }
  counters_->Fix(std::move(position));
}

std::unique_ptr<BatchIterator> DatasetShard::IterBatches(const BatchOptions& options) {
  const int64_t epoch = options.epoch >= 0 ? options.epoch : next_epoch_;
  next_epoch_ = epoch + 1;
  auto order = std::make_shared<PassOrder>();
  order->epoch = epoch;
  std::vector<int64_t> rows = EpochOrder(num_rows_, options_.seed, epoch, shuffle_);
  if (resume_ && resume_->epoch == epoch) {
    order->start = resume_->cursor;
    order->pending = static_cast<int64_t>(resume_->pending.size());
    order->rows = std::move(resume_->pending);
  }
  resume_.reset();
  if (order->pending == 0) {  // the usual pass: the order itself, without a copy
    rows.erase(rows.begin(), rows.begin() + order->start);
    order->rows = std::move(rows);
  } else {
    order->rows.insert(order->rows.end(), rows.begin() + order->start, rows.end());
  }
  if (options.local_shuffle_buffer_size <= 0) {
    return std::make_unique<ShardPass>(*this, options, order, nullptr);
  }
  auto draws = std::make_shared<RankDraws>(
      order, options_.world_size, std::max<int64_t>(options.batch_size, 1), options.drop_last,
      options.local_shuffle_buffer_size, options_.seed);
  auto pass = std::make_unique<ShardPass>(*this, options, order, draws);
  counters_->Drawn([draws] { return draws->Position(); });
  return pass;
}

}  // namespace rayd::data
