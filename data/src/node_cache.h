#pragma once
// The node cache behind `{cache: node}` (rayd/data/transforms.h): a dataset's rows, read and
// put through the steps before the cache step once per node, shared by every rank and trial on
// the node that reads the same dataset.
//
// How it works: rows are kept in chunks of consecutive rows (file order, about block_bytes
// each), each a block in the node's object store, owned by one detached rayd actor per node
// and fingerprint (named "rayd-data-cache-<node>-<fingerprint>" in namespace "rayd_data",
// started by the first reader that needs it, pinned to the node). A reader asks the actor for
// the chunks holding its rows; the actor makes those it lacks (one reader's request makes a
// chunk, the others wait for it) and returns them all, which the reader views in shared memory
// and gathers its rows from (a copy, in its own order). The actor evicts least recently used
// chunks over `cache_bytes` and exits once no reader has asked for `cache_idle_s` seconds;
// a later reader starts a new one.
//
// Also here: the 64-byte-prefixed blocks that data tasks, stages and the cache hand over
// through the object store.

#include <rayd/api.h>
#include <rayd/data/block.h>
#include <rayd/data/reader.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rayd::data::internal {

// A block as a data task, a stage or the node cache hands it over: a 64-byte prefix (the rows
// on_error: skip left out, then the cache's chunks made and chunks found, each a uint64) and the
// block (data/FORMAT.md), so the block stays 64-byte aligned in the object store.
struct BlockCounts {
  int64_t skipped = 0;
  int64_t cache_made = 0;  // chunks the node cache made for this block
  int64_t cache_hits = 0;  // chunks it already held
};
std::vector<uint8_t> Prefixed(const Block& block, const BlockCounts& counts);
// The block at `ref`, viewed where the object store holds it. Throws RaydError (the task's
// error, a lost object).
Result<Block> ViewPrefixed(const ObjectRef<std::vector<uint8_t>>& ref, BlockCounts* counts);

// What makes the cached rows what they are: the format, the files (paths, sizes, modification
// times), the reader's options and the steps before the cache step; not the seed, the order,
// where blocks are made or how big they are. Hex.
Result<std::string> CacheFingerprint(const DatasetSpec& spec);

// Rows `rows` of dataset `spec` (indices into its files' rows), made by the steps before its
// cache step, in that order, from this node's cache. `counts` gains the chunks made and found.
Result<Block> ReadThroughNodeCache(const DatasetSpec& spec, const std::string& spec_key,
                                   std::span<const int64_t> rows, BlockCounts* counts);

// The rows of dataset `spec` as this node's cache reads them (starting the cache if none runs):
// a reader with a cache step needs no reader of its own (nor its listing of the files).
Result<int64_t> NodeCacheRows(const DatasetSpec& spec, const std::string& spec_key);

}  // namespace rayd::data::internal
