#pragma once
// A block: a run of rows with named columns, the unit rayd Data reads, transforms, moves through
// the object store and batches (ARCHITECTURE.md §14). Its serialized layout is data/FORMAT.md.
//
// A column is either fixed-shape numbers (a dtype, a per-row shape, one contiguous row-major
// buffer of num_rows x shape) or variable-length bytes (num_rows + 1 int64 offsets into a data
// buffer: encoded images, strings). Blocks are immutable views: a column points into memory
// that the block's owners keep alive (a builder's vectors, a memory-mapped file, a serialized
// block in shared memory), so slicing and viewing a serialized block copy nothing. Copies of a
// Block share those owners; any thread may read a Block.

#include <rayd/base/status.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rayd::data {

enum class DType : uint8_t {
  kUInt8,
  kInt8,
  kUInt16,
  kInt16,
  kUInt32,
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kBytes,  // variable-length: offsets + data
};

// Bytes per element (kBytes: 1).
size_t ItemSize(DType dtype);
// NumPy's array-interface type string: "|u1", "<i8", "<f4", ... ("|S" for kBytes).
std::string_view NumpyDescr(DType dtype);
// The dtype of a NumPy type string ("<f4", "|u1", "uint8" and "float32" too); InvalidArgument
// for a type rayd Data does not hold (complex, big-endian, objects).
Result<DType> ParseDType(std::string_view descr);
// "uint8", "float32", "bytes", ...
std::string_view DTypeName(DType dtype);

struct ColumnSchema {
  std::string name;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;  // per row; empty: one number per row (and always for kBytes)
  bool operator==(const ColumnSchema&) const = default;
};
using Schema = std::vector<ColumnSchema>;
// "image: uint8[28, 28], label: uint8"
std::string DescribeSchema(const Schema& schema);

// One column of a block: a view into memory the block keeps alive.
struct Column {
  ColumnSchema schema;
  const uint8_t* data = nullptr;  // fixed: num_rows x RowElements() items; bytes: the payload
  const int64_t* offsets = nullptr;  // kBytes: num_rows + 1 positions into `data`, ascending

  const std::string& name() const { return schema.name; }
  DType dtype() const { return schema.dtype; }
  bool is_bytes() const { return schema.dtype == DType::kBytes; }
  // Elements per row of a fixed column (the product of its shape).
  int64_t RowElements() const;
  int64_t RowBytes() const { return RowElements() * static_cast<int64_t>(ItemSize(dtype())); }
  // Row `row` of a kBytes column.
  std::string_view BytesAt(int64_t row) const {
    return {reinterpret_cast<const char*>(data) + offsets[row],
            static_cast<size_t>(offsets[row + 1] - offsets[row])};
  }
  template <typename T>
  const T* As() const {
    return reinterpret_cast<const T*>(data);
  }
};

class Block {
 public:
  Block() = default;
  // `owners` keep the columns' memory alive.
  Block(int64_t num_rows, std::vector<Column> columns,
        std::vector<std::shared_ptr<const void>> owners)
      : num_rows_(num_rows), columns_(std::move(columns)), owners_(std::move(owners)) {}

  int64_t num_rows() const { return num_rows_; }
  const std::vector<Column>& columns() const { return columns_; }
  Schema schema() const;
  // The column named `name`, or null.
  const Column* Find(std::string_view name) const;
  // Bytes its columns cover (what it takes in the object store, near enough).
  int64_t nbytes() const;

  // Rows [begin, end) as a view of the same memory.
  Block Slice(int64_t begin, int64_t end) const;
  // Only the named columns (a view); NotFound naming the missing one and the ones there are.
  Result<Block> Select(const std::vector<std::string>& names) const;
  // The rows of `blocks` one after another, copied into one block; InvalidArgument when their
  // schemas differ (naming the first difference).
  static Result<Block> Concat(const std::vector<Block>& blocks);
  // The rows at `rows` (indices into this block, in that order), copied.
  Block Take(std::span<const int64_t> rows) const;
  // Rows of several blocks of one schema ((block, row) pairs, in that order), copied. Only the
  // blocks named in `rows` are read.
  static Block Gather(std::span<const Block> blocks,
                      std::span<const std::pair<int32_t, int64_t>> rows);

  // The layout of data/FORMAT.md.
  size_t SerializedSize() const;
  void SerializeTo(uint8_t* out) const;  // SerializedSize() bytes, 64-byte aligned `out`
  std::string Serialize() const;
  // A view of a serialized block at `data` (64-byte aligned), which `owner` keeps alive; checks
  // every offset and size against `size` (InvalidArgument naming what is wrong).
  static Result<Block> View(std::shared_ptr<const void> owner, const uint8_t* data, size_t size);

 private:
  int64_t num_rows_ = 0;
  std::vector<Column> columns_;
  std::vector<std::shared_ptr<const void>> owners_;
};

// Builds a block column by column into memory of its own. Not thread-safe.
//   BlockBuilder b(rows);
//   uint8_t* pixels = b.AddFixed({"image", DType::kUInt8, {28, 28}});  // fill rows x 784 bytes
//   b.AddBytes("path", {"a.jpg", "b.jpg"});
//   Block block = std::move(b).Finish();
class BlockBuilder {
 public:
  explicit BlockBuilder(int64_t num_rows) : num_rows_(num_rows) {}
  // A zeroed buffer of num_rows x RowElements items for the column, to fill.
  uint8_t* AddFixed(ColumnSchema schema);
  // The same, not zeroed, for a caller that writes every byte: large buffers are reused from
  // blocks freed earlier (fresh memory's page faults, and zeroing, cost a gather of mapped rows
  // a third of its speed).
  uint8_t* AddFixedForOverwrite(ColumnSchema schema);
  // A kBytes column of exactly num_rows values.
  void AddBytes(std::string name, const std::vector<std::string>& values);
  void AddBytes(std::string name, std::string data, std::vector<int64_t> offsets);
  // An existing column (of num_rows rows) and what keeps its memory alive.
  void AddColumn(Column column, std::shared_ptr<const void> owner);
  Block Finish() &&;

 private:
  int64_t num_rows_;
  std::vector<Column> columns_;
  std::vector<std::shared_ptr<const void>> owners_;
};

}  // namespace rayd::data
