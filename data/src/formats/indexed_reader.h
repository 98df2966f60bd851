#pragma once
// What every reader that locates rows through a RowIndex keeps: its schema, where its rows are,
// and the rows `on_error: skip` left out. A format's reader derives from it and fills them in.

#include <rayd/data/reader.h>

#include "../files.h"

namespace rayd::data::internal {

class IndexedReader : public Reader {
 public:
  const Schema& schema() const override { return schema_; }
  int64_t num_rows() const override { return index_.num_rows(); }
  int64_t skipped_rows() const override { return skipped_; }

 protected:
  Schema schema_;
  RowIndex index_;
  int64_t skipped_ = 0;
};

}  // namespace rayd::data::internal
