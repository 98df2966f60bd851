// WebDataset's tar shards (github.com/webdataset/webdataset): `paths` glob tar files (gzipped
// ones too, inflated in memory at open); each shard's regular files are grouped into samples by
// key, as WebDataset groups them: a member's key is its path up to the first dot of its base
// name and its extension (lower-cased) the rest, so 000123.jpg and 000123.cls are sample
// 000123's jpg and cls; consecutive members with one key are one sample. Members without a dot
// in their base name and top-level "__*__" metadata files are ignored, as WebDataset ignores
// them. Rows are the samples, shard after shard.
//
// Columns: one per extension of the dataset's first sample, in its member order, named by the
// extension; other extensions are ignored. `cls` is an int64 (the member is the text of an
// integer); every other column is bytes, unless `decode: true`, which decodes the jpg, jpeg and
// png columns (by the last part of the extension) into uint8 [H, W, C] with image_decode.h's
// options (size, mode, resize; without size, the first sample's image size). Decoding needs a
// build with image decoding (data/cmake/images.cmake).
//
// Each shard is indexed at open by walking its 512-byte headers (POSIX ustar, with pax `path`
// records and GNU long names, as Python's tarfile and GNU tar write them) in the mapped file; no
// member is read until its row is. A truncated tar or a bad header is an error at open naming
// the shard, the member and the byte offset. A sample that lacks a column, a cls that is not an
// integer or an image that cannot be decoded is an error naming the shard, the member and its
// byte offset (or the row is skipped and counted, with on_error: skip); a sample with two
// members of one extension is an error at open.

#include <rayd/data/reader.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

#include "../files.h"
#include "image_decode.h"
#include "text_rows.h"
#include "indexed_reader.h"

namespace rayd::data::internal::webdataset_format {
// A named namespace, not an anonymous one: unity builds put several formats in one unit.

constexpr size_t kBlock = 512;

// One regular file in a tar.
struct TarMember {
  std::string name;
  size_t header_at = 0;  // its first header (a long name's, when it has one)
  size_t data_at = 0;
  size_t size = 0;
};

// A header's number field: octal text (NUL- or space-terminated), or GNU's base-256 for large
// values (the first byte's high bit set).
bool ParseNumber(const uint8_t* field, size_t length, uint64_t* out) {
  uint64_t v = 0;
  if (field[0] & 0x80) {
    if (field[0] & 0x40) return false;  // negative
    v = field[0] & 0x3f;
    for (size_t i = 1; i < length; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | field[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < length && (field[i] == ' ' || field[i] == '\0')) ++i;
  const size_t first_digit = i;
  for (; i < length && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (field[i] - '0');
  }
  if (i == first_digit) return false;
  if (i < length && field[i] != ' ' && field[i] != '\0') return false;
  *out = v;
  return true;
}

std::string FieldString(const uint8_t* field, size_t length) {
  const auto* c = reinterpret_cast<const char*>(field);
  return std::string(c, strnlen(c, length));
}

// The value of the `path` record of a pax extended header ("LENGTH path=VALUE\n" records), or
// nullopt when it has none; false in `ok` when the records are malformed.
std::optional<std::string> PaxPath(std::string_view records, bool* ok) {
  *ok = true;
  std::optional<std::string> path;
  size_t at = 0;
  while (at < records.size() && records[at] != '\0') {
    size_t length = 0, i = at;
    while (i < records.size() && records[i] >= '0' && records[i] <= '9') {
      length = length * 10 + (records[i++] - '0');
      if (length > records.size()) break;
    }
    if (i == at || i >= records.size() || records[i] != ' ' || length > records.size() - at ||
        length < i - at + 2 || records[at + length - 1] != '\n') {
      *ok = false;
      return std::nullopt;
    }
    const std::string_view record = records.substr(i + 1, at + length - 1 - (i + 1));
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) {
      *ok = false;
      return std::nullopt;
    }
    if (record.substr(0, eq) == "path") path = std::string(record.substr(eq + 1));
    at += length;
  }
  return path;
}

// The next regular file from byte `at` on (a multiple of 512), moving `at` past it; nullopt at
// the archive's end (its zero block, or the file's end at a member boundary). Directories,
// links and the other entry types are passed over.
Result<std::optional<TarMember>> NextMember(const FileBytes& tar, size_t& at) {
  const uint8_t* d = tar.data();
  const size_t size = tar.size();
  const std::string& shard = tar.path();
  std::optional<std::string> long_name;
  size_t first_header = std::string::npos;
  while (at < size) {
    const size_t header_at = at;
    auto where = [&] { return shard + ": byte " + std::to_string(header_at) + ": "; };
    const uint8_t* h = d + at;
    const size_t left = std::min(size - at, kBlock);
    if (std::all_of(h, h + left, [](uint8_t b) { return b == 0; })) {
      return std::optional<TarMember>();  // the end-of-archive blocks (perhaps cut short)
    }
    if (left < kBlock) {
      return Status::InvalidArgument(where() + "not a tar, or truncated: the file ends at byte " +
                                     std::to_string(size) + ", inside what should be a header");
    }
    uint64_t checksum = 0, size_field = 0;
    if (!ParseNumber(h + 148, 8, &checksum)) {
      return Status::InvalidArgument(where() + "not a tar header (no checksum)");
    }
    uint64_t unsigned_sum = 0;
    int64_t signed_sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      const uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
      unsigned_sum += b;
      signed_sum += static_cast<int8_t>(b);
    }
    if (checksum != unsigned_sum && static_cast<int64_t>(checksum) != signed_sum) {
      return Status::InvalidArgument(where() + "not a tar header (its checksum is wrong)");
    }
    const char type = static_cast<char>(h[156]);
    std::string name = FieldString(h, 100);
    // POSIX ustar (not GNU's "ustar  ", which keeps other fields there) may split a long path.
    if (std::memcmp(h + 257, "ustar\0", 6) == 0 && h[345] != 0) {
      name = FieldString(h + 345, 155) + "/" + name;
    }
    if (long_name) name = *long_name;
    if (!ParseNumber(h + 124, 12, &size_field)) {
      return Status::InvalidArgument(where() + "member " + name + ": a bad size field");
    }
    const size_t data_at = at + kBlock;
    if (size_field > size - data_at) {
      return Status::InvalidArgument(where() + "truncated: member " + name + " holds " +
                                     std::to_string(size_field) +
                                     " bytes but the file ends at byte " + std::to_string(size));
    }
    if (first_header == std::string::npos) first_header = at;
    const std::string_view data(reinterpret_cast<const char*>(d + data_at), size_field);
    at = data_at + (size_field + kBlock - 1) / kBlock * kBlock;
    switch (type) {
      case 'L':  // GNU: the next member's name
        long_name = std::string(data.substr(0, strnlen(data.data(), data.size())));
        break;
      case 'x': {  // pax: records for the next member
        bool ok = true;
        std::optional<std::string> path = PaxPath(data, &ok);
        if (!ok) return Status::InvalidArgument(where() + "a malformed pax header");
        if (path) long_name = std::move(path);
        break;
      }
      case 'K':  // GNU long link name, pax global header: not about a file's name
      case 'g':
        break;
      case '0':
      case '\0':
      case '7':
        return std::optional<TarMember>(
            TarMember{std::move(name), first_header, data_at, static_cast<size_t>(size_field)});
      default:  // directories, links, devices
        long_name.reset();
        first_header = std::string::npos;
    }
  }
  return std::optional<TarMember>();
}

// WebDataset's split of a member's name into its sample's key and its extension:
// "dir/000123.seg.png" -> ("dir/000123", "seg.png"). False for names it ignores.
bool SplitName(std::string_view name, std::string_view* key, std::string* extension) {
  const size_t slash = name.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  if (slash == std::string_view::npos && base.size() >= 4 && base.starts_with("__") &&
      base.ends_with("__")) {
    return false;
  }
  const size_t dot = base.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  *key = name.substr(0, name.size() - base.size() + dot);
  extension->assign(base.substr(dot + 1));
  for (char& c : *extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

bool IsImageExtension(std::string_view extension) {
  const size_t dot = extension.rfind('.');
  const std::string_view last =
      dot == std::string_view::npos ? extension : extension.substr(dot + 1);
  return last == "jpg" || last == "jpeg" || last == "png";
}

// Where a column's member is in a shard; at == -1: the sample has no such member.
struct Span {
  int64_t at = -1;
  int64_t size = 0;
};

struct Shard {
  std::shared_ptr<const FileBytes> bytes;
  std::vector<size_t> first_header;  // per sample: its first member's header, for messages
  std::vector<Span> spans;           // samples x columns
};

class WebDatasetReader : public IndexedReader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  enum class Kind { kInt, kImage, kBytes };

  // Indexes one shard's samples (the first one fixes the columns).
  Status AddShard(const std::string& path);
  // The sample's key, from its first member's header.
  std::string KeyOf(const Shard& shard, int64_t sample) const;
  // "shard.tar: member 000123.cls at byte 1536" for column `column` of a sample.
  std::string MemberWhere(const Shard& shard, int64_t sample, size_t column) const;
  // Without a size option: the first sample's image size.
  Status SizeFromFirstImage();

  ImageOptions options_;
  bool skip_ = false;
  std::vector<std::string> extensions_;  // the columns
  std::vector<Kind> kinds_;
  std::string columns_from_;  // "sample 000000 of shard-0.tar", for messages
  std::vector<Shard> shards_;
};

std::string WebDatasetReader::KeyOf(const Shard& shard, int64_t sample) const {
  size_t at = shard.first_header[sample];
  Result<std::optional<TarMember>> member = NextMember(*shard.bytes, at);
  std::string_view key;
  std::string extension;
  if (!member.ok() || !*member || !SplitName((*member)->name, &key, &extension)) return "?";
  return std::string(key);
}

std::string WebDatasetReader::MemberWhere(const Shard& shard, int64_t sample, size_t column) const {
  const Span& span = shard.spans[sample * extensions_.size() + column];
  return shard.bytes->path() + ": member " + KeyOf(shard, sample) + "." + extensions_[column] +
         " at byte " + std::to_string(span.at - static_cast<int64_t>(kBlock));
}

Status WebDatasetReader::AddShard(const std::string& path) {
  RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
  Shard shard;
  shard.bytes = bytes;
  // The sample being gathered: its key, first header, and members by extension.
  std::string key;
  size_t first_header = 0;
  std::vector<std::pair<std::string, Span>> members;
  auto finish = [&]() -> Status {
    if (members.empty()) return Status::Ok();
    if (extensions_.empty()) {
      for (const auto& [extension, span] : members) extensions_.push_back(extension);
      columns_from_ = "sample " + key + " of " + path;
    }
    shard.first_header.push_back(first_header);
    for (const std::string& extension : extensions_) {
      auto it = std::find_if(members.begin(), members.end(),
                             [&](const auto& m) { return m.first == extension; });
      shard.spans.push_back(it == members.end() ? Span{} : it->second);
      if (it == members.end() && !skip_) {
        return Status::InvalidArgument(path + ": sample " + key + " (its first member at byte " +
                                       std::to_string(first_header) + ") has no ." + extension +
                                       " member (the columns come from " + columns_from_ + ")");
      }
    }
    members.clear();
    return Status::Ok();
  };
  size_t at = 0;
  while (true) {
    RAYD_ASSIGN_OR_RETURN(std::optional<TarMember> member, NextMember(*bytes, at));
    if (!member) break;
    std::string_view member_key;
    std::string extension;
    if (!SplitName(member->name, &member_key, &extension)) continue;
    if (members.empty() || member_key != key) {
      RAYD_RETURN_IF_ERROR(finish());
      key = std::string(member_key);
      first_header = member->header_at;
    } else if (std::any_of(members.begin(), members.end(),
                           [&](const auto& m) { return m.first == extension; })) {
      return Status::InvalidArgument(path + ": member " + member->name + " at byte " +
                                     std::to_string(member->header_at) + ": a second ." +
                                     extension + " in sample " + key);
    }
    members.emplace_back(
        extension, Span{static_cast<int64_t>(member->data_at), static_cast<int64_t>(member->size)});
  }
  RAYD_RETURN_IF_ERROR(finish());
  index_.Add(static_cast<int64_t>(shard.first_header.size()));
  shards_.push_back(std::move(shard));
  return Status::Ok();
}

Status WebDatasetReader::SizeFromFirstImage() {
#ifdef RAYD_DATA_IMAGES
  for (size_t c = 0; c < extensions_.size(); ++c) {
    if (kinds_[c] != Kind::kImage) continue;
    for (const Shard& shard : shards_) {
      const int64_t samples = static_cast<int64_t>(shard.first_header.size());
      for (int64_t s = 0; s < samples; ++s) {
        const Span& span = shard.spans[s * extensions_.size() + c];
        if (span.at < 0) continue;
        const std::string where = MemberWhere(shard, s, c);
        Result<ImageInfo> info =
            ReadImageInfo(shard.bytes->view().substr(span.at, span.size), where);
        if (info.ok()) {
          options_.height = info->height;
          options_.width = info->width;
          options_.size_from = where;
          return Status::Ok();
        }
        if (!skip_) return info.status();
      }
    }
    return Status::InvalidArgument("column " + extensions_[c] +
                                   ": no image to take the size from; give size: [H, W]");
  }
#endif
  return Status::Ok();
}

Result<std::unique_ptr<Reader>> WebDatasetReader::Open(const DatasetSpec& spec,
                                                       const std::vector<std::string>& files) {
  auto reader = std::make_unique<WebDatasetReader>();
  RAYD_ASSIGN_OR_RETURN(reader->options_, ParseImageOptions(spec.options, /*decode=*/false));
#ifndef RAYD_DATA_IMAGES
  if (reader->options_.decode) {
    return Status::InvalidArgument(
        "decode: this build has no image decoding (rayd was built without libjpeg-turbo and "
        "libpng: data/cmake/images.cmake); read the encoded bytes with decode: false");
  }
#endif
  reader->skip_ = spec.skip_errors();
  for (const std::string& path : files) RAYD_RETURN_IF_ERROR(reader->AddShard(path));
  if (reader->extensions_.empty()) {
    std::string where;
    for (const std::string& f : files) where += (where.empty() ? "" : ", ") + f;
    return Status::InvalidArgument("no samples (members named KEY.EXTENSION) in " + where);
  }
  ImageOptions& o = reader->options_;
  for (const std::string& extension : reader->extensions_) {
    reader->kinds_.push_back(extension == "cls"                        ? Kind::kInt
                             : o.decode && IsImageExtension(extension) ? Kind::kImage
                                                                       : Kind::kBytes);
  }
  if (o.decode && !o.has_size()) RAYD_RETURN_IF_ERROR(reader->SizeFromFirstImage());
  for (size_t c = 0; c < reader->extensions_.size(); ++c) {
    switch (reader->kinds_[c]) {
      case Kind::kInt:
        reader->schema_.push_back({"cls", DType::kInt64, {}});
        break;
      case Kind::kImage:
        reader->schema_.push_back(
            {reader->extensions_[c], DType::kUInt8, {o.height, o.width, o.channels}});
        break;
      case Kind::kBytes:
        reader->schema_.push_back({reader->extensions_[c], DType::kBytes, {}});
    }
  }
  return std::unique_ptr<Reader>(std::move(reader));
}

Result<Block> WebDatasetReader::Read(std::span<const int64_t> rows) {
  const size_t width = extensions_.size();
  std::vector<std::vector<int64_t>> ints(width);
  std::vector<std::shared_ptr<std::vector<uint8_t>>> pixels(width);
  std::vector<int64_t> row_bytes(width, 0);
  std::vector<std::string> data(width);
  std::vector<std::vector<int64_t>> offsets(width, std::vector<int64_t>{0});
  for (size_t c = 0; c < width; ++c) {
    if (kinds_[c] != Kind::kImage) continue;
    row_bytes[c] = Column{.schema = schema_[c]}.RowBytes();
    // Decoded pixels go straight into the block's buffer, a skipped row's slot reused.
    pixels[c] = std::make_shared<std::vector<uint8_t>>(
        std::max<size_t>(rows.size() * static_cast<size_t>(row_bytes[c]), 1));
  }
  std::vector<int64_t> values(width);
  int64_t kept = 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(row) + " is outside the dataset's " +
                                     std::to_string(num_rows()));
    }
    const auto [shard_index, sample] = index_.Locate(row);
    const Shard& shard = shards_[shard_index];
    const Span* spans = &shard.spans[sample * width];
    Status problem;
    for (size_t c = 0; c < width && problem.ok(); ++c) {
      if (spans[c].at < 0) {
        problem = Status::InvalidArgument(shard.bytes->path() + ": sample " + KeyOf(shard, sample) +
                                          " (its first member at byte " +
                                          std::to_string(shard.first_header[sample]) +
                                          ") has no ." + extensions_[c] +
                                          " member (the columns come from " + columns_from_ + ")");
        break;
      }
      const std::string_view bytes = shard.bytes->view().substr(spans[c].at, spans[c].size);
      if (kinds_[c] == Kind::kInt) {
        size_t b = 0, e = bytes.size();
        while (b < e && std::isspace(static_cast<unsigned char>(bytes[b]))) ++b;
        while (e > b && std::isspace(static_cast<unsigned char>(bytes[e - 1]))) --e;
        if (!ParseInt(bytes.substr(b, e - b), &values[c])) {
          problem =
              Status::InvalidArgument(MemberWhere(shard, sample, c) + ": '" +
                                      std::string(bytes.substr(0, 40)) + "' is not an integer");
        }
      } else if (kinds_[c] == Kind::kImage) {
#ifdef RAYD_DATA_IMAGES
        problem = DecodeToShape(bytes, options_, pixels[c]->data() + kept * row_bytes[c],
                                MemberWhere(shard, sample, c));
#endif
      }
    }
    if (!problem.ok()) {
      if (!skip_) return problem;
      ++skipped_;
      continue;
    }
    for (size_t c = 0; c < width; ++c) {
      if (kinds_[c] == Kind::kInt) {
        ints[c].push_back(values[c]);
      } else if (kinds_[c] == Kind::kBytes) {
        data[c].append(shard.bytes->view().substr(spans[c].at, spans[c].size));
        offsets[c].push_back(static_cast<int64_t>(data[c].size()));
      }
    }
    ++kept;
  }
  BlockBuilder out(kept);
  for (size_t c = 0; c < width; ++c) {
    switch (kinds_[c]) {
      case Kind::kInt: {
        uint8_t* to = out.AddFixed(schema_[c]);
        if (kept > 0) std::memcpy(to, ints[c].data(), ints[c].size() * sizeof(int64_t));
        break;
      }
      case Kind::kImage:
        out.AddColumn(Column{.schema = schema_[c], .data = pixels[c]->data()}, pixels[c]);
        break;
      case Kind::kBytes:
        out.AddBytes(schema_[c].name, std::move(data[c]), std::move(offsets[c]));
    }
  }
  return std::move(out).Finish();
}

const bool registered = RegisterFormat("webdataset", WebDatasetReader::Open);

}  // namespace rayd::data::internal::webdataset_format
