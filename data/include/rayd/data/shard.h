#pragma once
// A rank's shard of a dataset, iterated an epoch at a time as batches.
//
// How it works: opening a shard opens the dataset's reader and parses its transforms. Each
// IterBatches call is one pass over this rank's share of an epoch (rayd/data/order.h): the
// rows are cut into blocks of whole batches (about `block_bytes` each), and a producer makes
// the blocks ahead of the loop, in order: it reads a block's rows and applies the transforms,
// either on its own thread in this process (`execution: local`) or as rayd tasks placed like any
// other work (`execution: tasks`, with the dataset's `resources` and `label_selector`, so
// preprocessing may run on CPU-only nodes; the blocks come back through the object store and are
// viewed there without a copy). The loop takes batches as views of those blocks.
//
// Backpressure: the producer holds at most `prefetch_blocks` blocks made or in flight and not
// yet handed out, and starts a block only while the bytes it holds stay under `budget_bytes`
// (the node's object-store budget for training ingest, split among the node's ranks): when the
// loop falls behind the producer waits, so ingest never spills and never grows without bound.
// One block always may be in flight, so an over-large block cannot stall the pipeline.
//
// Threading: a shard and its iterators belong to the thread running the loop; the producer's
// thread is internal. Destroying an iterator stops its producer (joining it).

#include <rayd/base/status.h>
#include <rayd/data/block.h>
#include <rayd/data/reader.h>
#include <rayd/data/transforms.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rayd::data {

struct ShardOptions {
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;  // the run's; a dataset's own `seed:` wins
  // Bytes of blocks this shard may hold ahead of the loop (the dataset's `budget_bytes:` wins).
  int64_t budget_bytes = int64_t{256} << 20;
};

struct BatchOptions {
  int64_t batch_size = 256;
  // Leave out a last batch smaller than batch_size (every rank's is, or none's).
  bool drop_last = false;
  // The epoch to iterate; -1: the one after the last pass (0 first).
  int64_t epoch = -1;
  // Rows (Ray's local_shuffle_buffer_size): > 0 draws each batch at random from a buffer of at
  // least this many of the pass's rows, mixing rows across blocks, seeded by (seed, epoch,
  // rank) so a pass repeats exactly. For datasets read in order (`shuffle: false`, as large
  // sequential files are); the epoch's own shuffle needs none. The draws depend on the deal
  // alone, so the rows are read in the order they will be drawn: no buffer is held or copied.
  int64_t local_shuffle_buffer_size = 0;
};

// Where a shard stands in its epochs: `cursor` rows of epoch `epoch`'s order have been dealt to
// the steps handed out so far, over every rank (rayd/data/order.h), and of those, `pending` (the
// dataset's row numbers, in the order they were dealt) no batch has taken yet: the rows a local
// shuffle buffer held, on every rank. What a checkpoint records, and what a restarted run, of any
// world size, resumes from: its next pass of the epoch deals `pending` first, then the order from
// `cursor`.
struct ShardPosition {
  int64_t epoch = 0;
  int64_t cursor = 0;
  std::vector<int64_t> pending;
  bool operator==(const ShardPosition&) const = default;
};

// What a pass has cost so far (summed over the shard's passes).
struct ShardStats {
  double wait_seconds = 0;  // the loop's time blocked in Next for a block not made yet
  int64_t blocks = 0;
  int64_t rows = 0;
  int64_t bytes = 0;
  int64_t skipped_rows = 0;  // rows on_error: skip left out (made in this process)
  // The most block bytes (estimated from the rows read) a pass held at once, made or in flight
  // and not yet taken by the loop: what backpressure keeps under budget_bytes (plus one block).
  int64_t peak_held_bytes = 0;
  // Now: blocks made or in flight that the loop has not taken yet, and their estimated bytes.
  int64_t held_blocks = 0;
  int64_t held_bytes = 0;
  // With `{cache: node}`: the node cache's chunks this shard's blocks needed that the cache made
  // for it, and that it already held (made for another rank or trial, or an earlier epoch).
  int64_t cache_chunks_made = 0;
  int64_t cache_chunks_hit = 0;
};

class DatasetShard;
class DataStages;

// One pass over a shard's epoch. Next returns the next batch (a view of a block), nullopt at
// the end, or the error that ended the pass (a bad row, a failed task).
class BatchIterator {
 public:
  virtual ~BatchIterator() = default;
  virtual Result<std::optional<Block>> Next() = 0;
};

class DatasetShard {
 public:
  // Opens `spec`'s reader and transforms (errors name the dataset and what is wrong).
  static Result<std::unique_ptr<DatasetShard>> Open(const DatasetSpec& spec, ShardOptions options);
  ~DatasetShard();

  const std::string& name() const { return spec_.name; }
  // The columns of the batches, after the transforms (read from the dataset's first row).
  const Schema& schema() const { return schema_; }
  // The dataset's rows, after `rows: [BEGIN, END]` (a range of them: a validation split) and
  // `limit`.
  int64_t num_rows() const { return num_rows_; }
  // This rank's rows in one epoch at least (before filters); some ranks take one more.
  int64_t rows_per_epoch() const;
  bool shuffle() const { return shuffle_; }
  int64_t next_epoch() const { return next_epoch_; }

  std::unique_ptr<BatchIterator> IterBatches(const BatchOptions& options);

  // The last pass's position after the batches it has handed out (as every rank takes the same
  // steps, the same on every rank at a synchronous point such as a report): {0, 0} before any.
  // With a local shuffle buffer, `pending` holds the rows every rank's buffer had read and not
  // yet drawn (each rank's draws are a function of the pass, so any rank can tell the others').
  ShardPosition position() const;
  // The next pass of `position.epoch` (IterBatches with that epoch, or the next one) deals its
  // pending rows, then the rest of that epoch's order from its cursor, to this shard's world; a
  // cursor at the epoch's end with nothing pending makes the next pass the following epoch's.
  void ResumeAt(ShardPosition position);

  ShardStats stats() const;

 private:
  friend class ShardPass;
  DatasetShard() = default;
  Status StartStages(const std::vector<TransformStage>& stages, const std::optional<Block>& first_row);

  DatasetSpec spec_;
  ShardOptions options_;
  std::string spec_json_;  // what tasks get
  bool shuffle_ = true;
  bool tasks_ = false;
  int prefetch_blocks_ = 4;
  int64_t block_bytes_ = int64_t{4} << 20;
  int64_t first_row_ = 0;  // `rows: [BEGIN, END]`: the dataset's rows from BEGIN
  int64_t num_rows_ = 0;
  int64_t row_bytes_ = 1;  // the read rows' size, to cut blocks
  Schema schema_;
  int64_t next_epoch_ = 0;
  std::optional<ShardPosition> resume_;  // ResumeAt's, for the next pass of its epoch
  struct Counters;
  std::shared_ptr<Counters> counters_;  // shared with the passes' producers
  // The stages after the first (transforms with a placement: PlanStages), shared with the
  // passes; null when every step runs with the read.
  std::shared_ptr<DataStages> stages_;
};

}  // namespace rayd::data
