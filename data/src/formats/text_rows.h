#pragma once
// Row-addressable text files (CSV, JSON Lines): the byte range of every record of every file,
// found by one scan at open, so any row is read without reading the rows before it.

#include <rayd/data/reader.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../files.h"

namespace rayd::data::internal {

struct TextFile {
  std::shared_ptr<const FileBytes> bytes;
  std::vector<size_t> starts, ends;  // each record's bytes, [start, end)
  std::vector<int64_t> lines;  // each record's line number (records may span lines in CSV)
  int64_t records() const { return static_cast<int64_t>(starts.size()); }
  std::string_view Record(int64_t i) const;  // without its line break
};

// Splits `file` into records from byte `from` on: lines, or with `quotes` CSV records whose
// quoted fields may hold line breaks. Empty lines are no records (nor, without `quotes`, lines
// of spaces and tabs).
TextFile IndexRecords(std::shared_ptr<const FileBytes> file, size_t from, bool quotes);

// Numbers as CSV and JSON write them: the whole of `text` must be one.
bool ParseInt(std::string_view text, int64_t* out);
bool ParseDouble(std::string_view text, double* out);

}  // namespace rayd::data::internal
