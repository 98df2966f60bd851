// Block, its views and its serialized layout (data/FORMAT.md).

#include <rayd/base/logging.h>
#include <rayd/data/block.h>

#include "copy_rows.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>

namespace rayd::data {
namespace {

constexpr char kMagic[8] = {'R', 'A', 'Y', 'D', 'B', 'L', 'K', '1'};
constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct DTypeInfo {
  DType dtype;
  std::string_view descr, name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kUInt8, "|u1", "uint8", 1},     {DType::kInt8, "|i1", "int8", 1},
    {DType::kUInt16, "<u2", "uint16", 2},   {DType::kInt16, "<i2", "int16", 2},
    {DType::kUInt32, "<u4", "uint32", 4},   {DType::kInt32, "<i4", "int32", 4},
    {DType::kInt64, "<i8", "int64", 8},     {DType::kFloat32, "<f4", "float32", 4},
    {DType::kFloat64, "<f8", "float64", 8}, {DType::kBytes, "|S", "bytes", 1},
};

const DTypeInfo& Info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

// Where each column's buffers go in the serialized block, and the header that says so.
struct Layout {
  std::string header;  // padded
  std::vector<size_t> data_at, offsets_at;
  size_t total = 0;
};

int64_t BytesData(const Column& c, int64_t rows) { return c.offsets[rows] - c.offsets[0]; }

Layout Plan(const Block& block) {
  // Offsets depend on the header's length and the header holds offsets: iterate until the
  // padded length stops moving (twice at most in practice).
  Layout layout;
  size_t header_room = 0;
  for (int round = 0; round < 4; ++round) {
    size_t at = AlignUp(16 + header_room);
    nlohmann::json columns = nlohmann::json::array();
    layout.data_at.clear();
    layout.offsets_at.clear();
    for (const Column& c : block.columns()) {
      const int64_t rows = block.num_rows();
      const size_t nbytes = c.is_bytes() ? static_cast<size_t>(BytesData(c, rows))
                                         : static_cast<size_t>(rows * c.RowBytes());
      nlohmann::json col = {{"name", c.name()},
                            {"dtype", std::string(NumpyDescr(c.dtype()))},
                            {"shape", c.schema.shape},
                            {"data", {at, nbytes}}};
      layout.data_at.push_back(at);
      at = AlignUp(at + nbytes);
      if (c.is_bytes()) {
        const size_t offsets_bytes = static_cast<size_t>(rows + 1) * sizeof(int64_t);
        col["offsets"] = {at, offsets_bytes};
        layout.offsets_at.push_back(at);
        at = AlignUp(at + offsets_bytes);
      } else {
        layout.offsets_at.push_back(0);
      }
      columns.push_back(std::move(col));
    }
    std::string header =
        nlohmann::json{{"num_rows", block.num_rows()}, {"columns", columns}}.dump();
    const size_t padded = AlignUp(16 + header.size()) - 16;
    if (padded == header_room) {
      header.resize(padded, ' ');
      layout.header = std::move(header);
      layout.total = at;
      return layout;
    }
    header_room = padded;
  }
  RAYD_CHECK_MSG(false, "block header layout did not settle");
  return layout;
}

// Large block buffers, kept for reuse when their blocks are freed. A producer makes a block of a
// few MiB per step; fresh memory costs a page fault per 4 KiB on first touch (~10 us here), which
// held a mapped token file's gather to 0.55x of memcpy; reused, 0.85x. Holds at most kMaxHeld
// bytes; any thread may take and give.
class BufferPool {
 public:
  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool();  // blocks may outlive any owner: never destroyed
    return *pool;
  }
  // `n` bytes, not zeroed.
  std::shared_ptr<uint8_t[]> Take(size_t n) {
    if (n >= kMinPooled) {
      std::lock_guard lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second >= n && it->second <= 2 * n) {
          const auto [data, size] = *it;
          free_.erase(it);
          held_ -= size;
          return Wrap(data, size);
        }
      }
    }
    return Wrap(new uint8_t[n], n);
  }

 private:
  static constexpr size_t kMinPooled = size_t{256} << 10;
  static constexpr size_t kMaxHeld = size_t{64} << 20;

  std::shared_ptr<uint8_t[]> Wrap(uint8_t* data, size_t size) {
    return std::shared_ptr<uint8_t[]>(data, [this, size](uint8_t* p) { Give(p, size); });
  }
  void Give(uint8_t* data, size_t size) {
    {
      std::lock_guard lock(mu_);
      if (size >= kMinPooled && held_ + size <= kMaxHeld) {
        free_.emplace_back(data, size);
        held_ += size;
        return;
      }
    }
    delete[] data;
  }

  std::mutex mu_;
  std::vector<std::pair<uint8_t*, size_t>> free_;  // guarded by mu_
  size_t held_ = 0;                                // guarded by mu_
};

}  // namespace

size_t ItemSize(DType dtype) { return Info(dtype).size; }
std::string_view NumpyDescr(DType dtype) { return Info(dtype).descr; }
std::string_view DTypeName(DType dtype) { return Info(dtype).name; }

Result<DType> ParseDType(std::string_view descr) {
  for (const DTypeInfo& info : kDTypes) {
    if (descr == info.descr || descr == info.name) return info.dtype;
  }
  // NumPy writes single bytes as "|u1" but also "<u1"; native order on a little-endian machine
  // as "="; "|S" with a width is a fixed-length string, which rayd keeps as bytes.
  if (descr.size() >= 3 && (descr[0] == '<' || descr[0] == '=' || descr[0] == '|')) {
    std::string little = "<" + std::string(descr.substr(1));
    for (const DTypeInfo& info : kDTypes) {
      if (little == info.descr || (info.size == 1 && "|" + little.substr(1) == info.descr)) {
        return info.dtype;
      }
    }
  }
  return Status::InvalidArgument("dtype '" + std::string(descr) +
                                 "' is not one rayd Data holds (uint8, int8, uint16, int16, "
                                 "uint32, int32, int64, float32, float64, bytes; little-endian)");
}

std::string DescribeSchema(const Schema& schema) {
  std::string out;
  for (const ColumnSchema& c : schema) {
    if (!out.empty()) out += ", ";
    out += c.name + ": " + std::string(DTypeName(c.dtype));
    if (!c.shape.empty()) {
      out += "[";
      for (size_t i = 0; i < c.shape.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(c.shape[i]);
      }
      out += "]";
    }
  }
  return out;
}

int64_t Column::RowElements() const {
  return std::accumulate(schema.shape.begin(), schema.shape.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

Schema Block::schema() const {
  Schema out;
  for (const Column& c : columns_) out.push_back(c.schema);
  return out;
}

const Column* Block::Find(std::string_view name) const {
  for (const Column& c : columns_) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

int64_t Block::nbytes() const {
  int64_t n = 0;
  for (const Column& c : columns_) {
    n += c.is_bytes() ? BytesData(c, num_rows_) + (num_rows_ + 1) * 8 : num_rows_ * c.RowBytes();
  }
  return n;
}

Block Block::Slice(int64_t begin, int64_t end) const {
  begin = std::clamp<int64_t>(begin, 0, num_rows_);
  end = std::clamp<int64_t>(end, begin, num_rows_);
  std::vector<Column> columns = columns_;
  for (Column& c : columns) {
    if (c.is_bytes()) {
      c.offsets += begin;  // offsets stay positions into the same data buffer
    } else {
      c.data += begin * c.RowBytes();
    }
  }
  return Block(end - begin, std::move(columns), owners_);
}

Result<Block> Block::Select(const std::vector<std::string>& names) const {
  std::vector<Column> columns;
  for (const std::string& name : names) {
    const Column* c = Find(name);
    if (c == nullptr) {
      return Status::NotFound("no column '" + name + "' (the dataset has " +
                              DescribeSchema(schema()) + ")");
    }
    columns.push_back(*c);
  }
  return Block(num_rows_, std::move(columns), owners_);
}

Result<Block> Block::Concat(const std::vector<Block>& blocks) {
  if (blocks.empty()) return Block();
  if (blocks.size() == 1) return blocks[0];
  const Schema schema = blocks[0].schema();
  int64_t rows = 0;
  for (const Block& b : blocks) {
    if (b.schema() != schema) {
      return Status::InvalidArgument("blocks with different columns: " + DescribeSchema(schema) +
                                     " and " + DescribeSchema(b.schema()));
    }
    rows += b.num_rows();
  }
  BlockBuilder out(rows);
  for (size_t i = 0; i < schema.size(); ++i) {
    if (schema[i].dtype == DType::kBytes) {
      std::string data;
      std::vector<int64_t> offsets{0};
      for (const Block& b : blocks) {
        const Column& c = b.columns_[i];
        const int64_t base = c.offsets[0];
        data.append(reinterpret_cast<const char*>(c.data) + base,
                    static_cast<size_t>(c.offsets[b.num_rows()] - base));
        const int64_t shift = offsets.back() - base;
        for (int64_t r = 1; r <= b.num_rows(); ++r) offsets.push_back(c.offsets[r] + shift);
      }
      out.AddBytes(schema[i].name, std::move(data), std::move(offsets));
      continue;
    }
    uint8_t* to = out.AddFixed(schema[i]);
    for (const Block& b : blocks) {
      const Column& c = b.columns_[i];
      const size_t n = static_cast<size_t>(b.num_rows() * c.RowBytes());
      if (n > 0) std::memcpy(to, c.data, n);
      to += n;
    }
  }
  return std::move(out).Finish();
}

Block Block::Take(std::span<const int64_t> rows) const {
  std::vector<std::pair<int32_t, int64_t>> at;
  at.reserve(rows.size());
  for (int64_t r : rows) at.emplace_back(0, r);
  return Gather({this, 1}, at);
}

Block Block::Gather(std::span<const Block> blocks,
                    std::span<const std::pair<int32_t, int64_t>> rows) {
  BlockBuilder out(static_cast<int64_t>(rows.size()));
  if (rows.empty()) return std::move(out).Finish();
  const Block& model = blocks[rows.front().first];  // the schema (other blocks may be emptied)
  for (size_t i = 0; i < model.columns_.size(); ++i) {
    const Column& first = model.columns_[i];
    if (first.is_bytes()) {
      size_t total = 0;
      for (const auto& [b, r] : rows) total += blocks[b].columns_[i].BytesAt(r).size();
      std::string data;
      data.reserve(total);
      std::vector<int64_t> offsets;
      offsets.reserve(rows.size() + 1);
      offsets.push_back(0);
      for (const auto& [b, r] : rows) {
        data.append(blocks[b].columns_[i].BytesAt(r));
        offsets.push_back(static_cast<int64_t>(data.size()));
      }
      out.AddBytes(first.name(), std::move(data), std::move(offsets));
      continue;
    }
    const int64_t row_bytes = first.RowBytes();
    uint8_t* to = out.AddFixedForOverwrite(first.schema);
    internal::CopyRows(to, rows.size(), static_cast<size_t>(row_bytes), [&](size_t at) {
      const auto [b, r] = rows[at];
      return blocks[b].columns_[i].data + r * row_bytes;
    });
  }
  return std::move(out).Finish();
}

size_t Block::SerializedSize() const { return Plan(*this).total; }

void Block::SerializeTo(uint8_t* out) const {
  const Layout layout = Plan(*this);
  std::memset(out, 0, layout.total);
  std::memcpy(out, kMagic, 8);
  const uint64_t header_len = layout.header.size();
  std::memcpy(out + 8, &header_len, 8);
  std::memcpy(out + 16, layout.header.data(), layout.header.size());
  for (size_t i = 0; i < columns_.size(); ++i) {
    const Column& c = columns_[i];
    if (!c.is_bytes()) {
      const size_t n = static_cast<size_t>(num_rows_ * c.RowBytes());
      if (n > 0) std::memcpy(out + layout.data_at[i], c.data, n);
      continue;
    }
    const int64_t base = c.offsets[0];
    const size_t n = static_cast<size_t>(c.offsets[num_rows_] - base);
    if (n > 0) std::memcpy(out + layout.data_at[i], c.data + base, n);
    auto* offsets = reinterpret_cast<int64_t*>(out + layout.offsets_at[i]);
    for (int64_t r = 0; r <= num_rows_; ++r) offsets[r] = c.offsets[r] - base;
  }
}

std::string Block::Serialize() const {
  std::string out(SerializedSize(), '\0');
  SerializeTo(reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

Result<Block> Block::View(std::shared_ptr<const void> owner, const uint8_t* data, size_t size) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("not a rayd Data block: " + what);
  };
  if (size < 16 || std::memcmp(data, kMagic, 8) != 0) return bad("no RAYDBLK1 magic");
  uint64_t header_len = 0;
  std::memcpy(&header_len, data + 8, 8);
  if (header_len > size - 16) return bad("its header runs past its end");
  nlohmann::json header = nlohmann::json::parse(
      reinterpret_cast<const char*>(data) + 16,
      reinterpret_cast<const char*>(data) + 16 + header_len, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object() || !header.contains("num_rows") || !header.contains("columns") ||
      !header["num_rows"].is_number_integer() || !header["columns"].is_array()) {
    return bad("its header is not {num_rows, columns}");
  }
  const int64_t rows = header["num_rows"].get<int64_t>();
  if (rows < 0) return bad("negative num_rows");
  // A buffer [offset, nbytes] inside the block.
  auto range = [&](const nlohmann::json& r, size_t* at, size_t* n) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
        !r[1].is_number_unsigned()) {
      return false;
    }
    *at = r[0].get<size_t>();
    *n = r[1].get<size_t>();
    return *at <= size && *n <= size - *at;
  };
  std::vector<Column> columns;
  for (const nlohmann::json& col : header["columns"]) {
    if (!col.is_object() || !col.value("name", nlohmann::json()).is_string() ||
        !col.value("dtype", nlohmann::json()).is_string()) {
      return bad("a column without a name or dtype");
    }
    Column c;
    c.schema.name = col["name"].get<std::string>();
    Result<DType> dtype = ParseDType(col["dtype"].get<std::string>());
    if (!dtype.ok()) return bad("column '" + c.schema.name + "': " + dtype.status().message());
    c.schema.dtype = *dtype;
    for (const nlohmann::json& d : col.value("shape", nlohmann::json::array())) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("a bad shape");
      c.schema.shape.push_back(d.get<int64_t>());
    }
    size_t at = 0, n = 0;
    if (!range(col.value("data", nlohmann::json()), &at, &n)) {
      return bad("column '" + c.schema.name + "' has its data outside the block");
    }
    c.data = data + at;
    if (c.is_bytes()) {
      size_t oat = 0, on = 0;
      // rows < size / 8 first: (rows + 1) * 8 must not wrap round to a size that fits.
      if (!range(col.value("offsets", nlohmann::json()), &oat, &on) ||
          static_cast<uint64_t>(rows) >= size / 8 || on != static_cast<size_t>(rows + 1) * 8 ||
          oat % 8 != 0) {
        return bad("column '" + c.schema.name + "' has bad offsets");
      }
      c.offsets = reinterpret_cast<const int64_t*>(data + oat);
      if (c.offsets[0] != 0) return bad("column '" + c.schema.name + "': offsets start above 0");
      for (int64_t r = 0; r < rows; ++r) {
        if (c.offsets[r + 1] < c.offsets[r]) {
          return bad("column '" + c.schema.name + "': offsets go down");
        }
      }
      if (static_cast<size_t>(c.offsets[rows]) > n) {
        return bad("column '" + c.schema.name + "': offsets past its data");
      }
    } else {
      // rows x shape x item size, refusing sizes that overflow (which would wrap round to a
      // size that fits).
      int64_t row_bytes = static_cast<int64_t>(ItemSize(c.dtype())), want = 0;
      for (int64_t d : c.schema.shape) {
        if (__builtin_mul_overflow(row_bytes, d, &row_bytes)) {
          return bad("column '" + c.schema.name + "' has a shape that overflows");
        }
      }
      if (__builtin_mul_overflow(row_bytes, rows, &want)) {
        return bad("column '" + c.schema.name + "' is too big for its block");
      }
      if (at % ItemSize(c.dtype()) != 0 || n != static_cast<size_t>(want)) {
        return bad("column '" + c.schema.name + "' has " + std::to_string(n) + " bytes, not " +
                   std::to_string(want));
      }
    }
    columns.push_back(std::move(c));
  }
  return Block(rows, std::move(columns), {std::move(owner)});
}

uint8_t* BlockBuilder::AddFixed(ColumnSchema schema) {
  Column c{.schema = std::move(schema)};
  const size_t n = static_cast<size_t>(num_rows_ * c.RowBytes());
  auto buffer = std::make_shared<std::vector<uint8_t>>(std::max<size_t>(n, 1));
  uint8_t* out = buffer->data();
  c.data = out;
  columns_.push_back(std::move(c));
  owners_.push_back(std::move(buffer));
  return out;
}

uint8_t* BlockBuilder::AddFixedForOverwrite(ColumnSchema schema) {
  Column c{.schema = std::move(schema)};
  const size_t n = std::max<size_t>(static_cast<size_t>(num_rows_ * c.RowBytes()), 1);
  std::shared_ptr<uint8_t[]> buffer = BufferPool::Get().Take(n);
  uint8_t* out = buffer.get();
  c.data = out;
  columns_.push_back(std::move(c));
  owners_.push_back(std::move(buffer));
  return out;
}

void BlockBuilder::AddBytes(std::string name, const std::vector<std::string>& values) {
  std::string data;
  std::vector<int64_t> offsets{0};
  offsets.reserve(values.size() + 1);
  for (const std::string& v : values) {
    data += v;
    offsets.push_back(static_cast<int64_t>(data.size()));
  }
  AddBytes(std::move(name), std::move(data), std::move(offsets));
}

void BlockBuilder::AddBytes(std::string name, std::string data, std::vector<int64_t> offsets) {
  RAYD_CHECK_MSG(static_cast<int64_t>(offsets.size()) == num_rows_ + 1, "offsets for " + name);
  struct Owned {
    std::string data;
    std::vector<int64_t> offsets;
  };
  auto owned = std::make_shared<Owned>(Owned{std::move(data), std::move(offsets)});
  Column c{.schema = {std::move(name), DType::kBytes, {}},
           .data = reinterpret_cast<const uint8_t*>(owned->data.data()),
           .offsets = owned->offsets.data()};
  columns_.push_back(std::move(c));
  owners_.push_back(std::move(owned));
}

void BlockBuilder::AddColumn(Column column, std::shared_ptr<const void> owner) {
  columns_.push_back(std::move(column));
  if (owner) owners_.push_back(std::move(owner));
}

Block BlockBuilder::Finish() && {
  return Block(num_rows_, std::move(columns_), std::move(owners_));
}

}  // namespace rayd::data
