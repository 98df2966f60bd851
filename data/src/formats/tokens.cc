// Token files, memory-mapped and cut into fixed-length samples: nanoGPT's flat `.bin` (numbers
// back to back, uint16 unless `dtype` says otherwise) and Megatron's `.bin` + `.idx` pair (the
// `.idx` beside a `.bin` gives its dtype and its documents; the documents are concatenated, as
// Megatron's GPT dataset does).
//
// Options: seq_len (required): each row is a window of seq_len + 1 tokens, column "tokens"
// (inputs are tokens[:-1], targets tokens[1:]); row k starts at token k * seq_len, so windows
// overlap by one token and every token is a target once. Each file is cut on its own.

#include <sys/stat.h>

#include <cstring>

#include "../files.h"
#include "fixed_columns.h"

namespace rayd::data::internal::tokens_format {

uint64_t U64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Megatron's dtype codes (megatron/core/datasets/indexed_dataset.py).
Result<DType> MegatronDType(int code, const std::string& path) {
  switch (code) {
    case 1: return DType::kUInt8;
    case 2: return DType::kInt8;
    case 3: return DType::kInt16;
    case 4: return DType::kInt32;
    case 5: return DType::kInt64;
    case 6: return DType::kFloat64;
    case 7: return DType::kFloat32;
    case 8: return DType::kUInt16;
    default:
      return Status::InvalidArgument(path + ": unknown Megatron dtype code " +
                                     std::to_string(code) + " at byte 17");
  }
}

// The token count and dtype that `idx_path` (a Megatron .idx) gives its .bin.
Result<std::pair<DType, int64_t>> ReadMegatronIndex(const std::string& idx_path) {
  RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> idx, FileBytes::Open(idx_path));
  const uint8_t* d = idx->data();
  if (idx->size() < 34 || std::memcmp(d, "MMIDIDX\x00\x00", 9) != 0) {
    return Status::InvalidArgument(idx_path + ": not a Megatron index (no MMIDIDX magic)");
  }
  RAYD_ASSIGN_OR_RETURN(DType dtype, MegatronDType(d[17], idx_path));
  const uint64_t sequences = U64(d + 18);
  const size_t sizes_at = 34, pointers_at = sizes_at + 4 * sequences;
  // The count first: 12 bytes a sequence must not wrap round to a size that fits.
  if (sequences > (idx->size() - sizes_at) / 12 || idx->size() < pointers_at + 8 * sequences) {
    return Status::InvalidArgument(idx_path + ": truncated: " + std::to_string(sequences) +
                                   " sequences promised, the file ends at byte " +
                                   std::to_string(idx->size()));
  }
  if (sequences == 0) return std::pair{dtype, int64_t{0}};
  int32_t last_size;
  std::memcpy(&last_size, d + sizes_at + 4 * (sequences - 1), 4);
  const uint64_t last_pointer = U64(d + pointers_at + 8 * (sequences - 1));
  return std::pair{dtype, static_cast<int64_t>(last_pointer / ItemSize(dtype)) + last_size};
}

Result<std::unique_ptr<Reader>> OpenTokens(const DatasetSpec& spec,
                                           const std::vector<std::string>& files) {
  if (!spec.options.contains("seq_len") || !spec.options["seq_len"].is_number_integer() ||
      spec.options["seq_len"].get<int64_t>() < 1) {
    return Status::InvalidArgument("seq_len: token datasets need a sample length of at least 1");
  }
  const int64_t seq_len = spec.options["seq_len"].get<int64_t>();
  const nlohmann::json dtype_name = spec.options.value("dtype", nlohmann::json("uint16"));
  if (!dtype_name.is_string()) {
    return Status::InvalidArgument("dtype: expected a token type such as uint16 or int32");
  }
  RAYD_ASSIGN_OR_RETURN(DType flat_dtype, ParseDType(dtype_name.get<std::string>()));
  FixedColumn column;
  column.schema = {"tokens", flat_dtype, {seq_len + 1}};
  bool first = true;
  for (const std::string& path : files) {
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".idx") == 0) continue;
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bin,
                          FileBytes::Open(path, /*inflate=*/false));
    DType dtype = flat_dtype;
    int64_t tokens = static_cast<int64_t>(bin->size() / ItemSize(dtype));
    const std::string idx_path =
        (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0
             ? path.substr(0, path.size() - 4)
             : path) + ".idx";
    struct stat st {};
    if (::stat(idx_path.c_str(), &st) == 0) {
      RAYD_ASSIGN_OR_RETURN(auto index, ReadMegatronIndex(idx_path));
      dtype = index.first;
      tokens = index.second;
      if (static_cast<size_t>(tokens) * ItemSize(dtype) > bin->size()) {
        return Status::InvalidArgument(
            path + ": truncated: its index promises " + std::to_string(tokens) + " tokens (" +
            std::to_string(tokens * ItemSize(dtype)) + " bytes), the file has " +
            std::to_string(bin->size()) + " bytes");
      }
    } else if (bin->size() % ItemSize(dtype) != 0) {
      return Status::InvalidArgument(path + ": " + std::to_string(bin->size()) +
                                     " bytes is not a whole number of " +
                                     std::string(DTypeName(dtype)) + " tokens (truncated?)");
    }
    if (!first && dtype != column.schema.dtype) {
      return Status::InvalidArgument(path + ": tokens are " + std::string(DTypeName(dtype)) +
                                     " here but " + std::string(DTypeName(column.schema.dtype)) +
                                     " in " + column.runs[0].path);
    }
    first = false;
    column.schema.dtype = dtype;
    const int64_t item = static_cast<int64_t>(ItemSize(dtype));
    AddRun(column, {.owner = bin,
                    .first_row = bin->data(),
                    .rows = tokens > seq_len ? (tokens - 1) / seq_len : 0,
                    .stride = seq_len * item,
                    .path = path});
  }
  std::vector<FixedColumn> columns;
  columns.push_back(std::move(column));
  return FixedColumnsReader::Make(std::move(columns));
}

const bool registered = RegisterFormat("tokens", OpenTokens);

}  // namespace rayd::data::internal::tokens_format
