#pragma once
// Reading a dataset: one small interface per file format, and the registry that opens a
// dataset's files with the reader its `format` names.
//
// Every reader here is row-addressable: opening it lists its files and learns how many rows
// each holds (from a header for IDX, .npy, token files and HDF5; from one scan of line or
// member offsets for CSV, JSON Lines and tar shards; one row per file for image folders), so an
// epoch can be any permutation of the rows and a shard's place is one number. Fetching bytes
// (mapped files, gzip, archives) is kept apart from decoding them (data/src/files.h).
//
// Errors name the file and the row or byte offset. A reader with `on_error: skip` drops a row
// it cannot decode and counts it (skipped_rows()) instead of failing.

#include <rayd/base/status.h>
#include <rayd/data/block.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace rayd::data {

// One dataset as train.yaml / tune.yaml name it:
//   datasets: {NAME: {format: FORMAT, paths: [GLOB, ...], ...format options}}
struct DatasetSpec {
  std::string name;
  std::string format;
  std::vector<std::string> paths;  // globs (sorted matches, in the order given)
  // Everything else the dataset's entry holds: format options, transforms, shuffle...
  nlohmann::json options = nlohmann::json::object();
  bool skip_errors() const { return options.value("on_error", "raise") == "skip"; }
};

// A dataset's rows, read by index. Not thread-safe: one reader per thread (Open another for
// another thread; opening is cheap next to reading).
class Reader {
 public:
  virtual ~Reader() = default;
  virtual const Schema& schema() const = 0;
  virtual int64_t num_rows() const = 0;
  // The rows `rows` (each in [0, num_rows())), in that order, as one block. With on_error:
  // skip, rows that cannot be decoded are left out (the block has fewer rows) and counted.
  virtual Result<Block> Read(std::span<const int64_t> rows) = 0;
  virtual int64_t skipped_rows() const { return 0; }
};

// Opens `spec.paths` (already expanded, sorted, at least one) with the options of `spec`.
using ReaderFactory = Result<std::unique_ptr<Reader>> (*)(const DatasetSpec& spec,
                                                          const std::vector<std::string>& files);

// Registers a format under `name` (one line in each format's file). Returns true.
bool RegisterFormat(const std::string& name, ReaderFactory factory);
// The formats this build reads (sorted).
std::vector<std::string> RegisteredFormats();

// Expands spec.paths and opens them with spec.format's reader. NotFound naming a glob that
// matches nothing; InvalidArgument for an unknown format (naming the ones there are) or a bad
// option.
Result<std::unique_ptr<Reader>> OpenReader(const DatasetSpec& spec);

// The files a glob matches, sorted (a path without wildcards matches itself if it exists).
Result<std::vector<std::string>> ExpandGlob(const std::string& pattern);

// Parses one entry of `datasets:` (a JSON object: format, paths, options); InvalidArgument
// naming the key.
Result<DatasetSpec> ParseDatasetSpec(const std::string& name, const nlohmann::json& entry);
// All of them, by name.
Result<std::vector<DatasetSpec>> ParseDatasets(const nlohmann::json& datasets);

}  // namespace rayd::data
