// Built-in transforms over decoded image columns (rayd/data/transforms.h registers them by name,
// as transforms.cc does the others; in rayd_data, a shared library, so the registration runs when
// it is loaded).
//
// random_crop {column (image), size: [h, w], padding (0), seed (0)}: each row of a fixed-shape
// column of [H, W] or [H, W, C] elements (uint8 images usually; any fixed dtype) zero-padded by
// `padding` on every side and cut to [h, w] (or [h, w, C]) at an offset drawn from the seed, the
// epoch (TransformEpoch) and a hash of the row's own bytes. So an image gets a new crop each
// epoch, as with torchvision's RandomCrop, and a row's crop does not depend on the batch or block
// it is in, on the process that makes it, or on the order of the epoch: the transform stays
// stateless (any process may make any block, a block made again after a failure or a resume is
// the same). Before a `{cache: node}` step the rows are made once for every epoch, and so is
// their crop. The other columns pass through as views.

#include <rayd/data/transforms.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace rayd::data::internal::image_transforms {
// A named namespace, not an anonymous one: unity builds put several sources in one unit.

// SplitMix64's finalizer: every input bit reaches every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A hash of an image's `n` bytes for its crop: of every 8-byte word of an image up to 4 KiB, and
// of 512 words spread evenly over a larger one, in four lanes whose multiplies overlap. Reading
// every word of a large image cost what reading it does (~10 us for 224 x 224, a fifth of its
// decode); the crop reads most of those lines next anyway. Images alike at all 512 words share a
// crop, which costs an augmentation nothing.
uint64_t HashBytes(const uint8_t* p, size_t n) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ULL;
  constexpr size_t kMaxWords = 512;
  const size_t words = n / 8;
  const size_t taken = std::min(words, kMaxWords);
  auto word = [&](size_t k) {  // the k-th of the `taken` words
    uint64_t w;
    std::memcpy(&w, p + 8 * (taken == words ? k : k * words / taken), 8);
    return w;
  };
  uint64_t lane[4] = {kMul ^ n, Mix(1), Mix(2), Mix(3)};
  size_t k = 0;
  for (; k + 4 <= taken; k += 4) {
    for (size_t l = 0; l < 4; ++l) {
      lane[l] = (lane[l] ^ word(k + l)) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  }
  uint64_t h = lane[0];
  for (size_t l = 1; l < 4; ++l) h = (h ^ Mix(lane[l])) * kMul;
  for (; k < taken; ++k) h = (h ^ word(k)) * kMul;
  uint64_t tail = 0;
  std::memcpy(&tail, p + 8 * words, n - 8 * words);
  return Mix(h ^ tail);
}

std::string Dims(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

struct CropArgs {
  std::string column;
  int64_t h = 0, w = 0, padding = 0;
  uint64_t seed = 0;
};

Result<CropArgs> ParseCropArgs(const nlohmann::json& args) {
  CropArgs out;
  const nlohmann::json column = args.value("column", nlohmann::json("image"));
  if (!column.is_string()) {
    return Status::InvalidArgument("random_crop: column: expected a column name, got " + column.dump());
  }
  out.column = column.get<std::string>();
  const nlohmann::json size = args.value("size", nlohmann::json());
  if (!size.is_array() || size.size() != 2 || !size[0].is_number_integer() ||
      !size[1].is_number_integer() || size[0].get<int64_t>() < 1 || size[1].get<int64_t>() < 1) {
    return Status::InvalidArgument("random_crop: size: expected [HEIGHT, WIDTH] of at least 1, got " +
                                   size.dump());
  }
  out.h = size[0].get<int64_t>();
  out.w = size[1].get<int64_t>();
  const nlohmann::json padding = args.value("padding", nlohmann::json(0));
  if (!padding.is_number_integer() || padding.get<int64_t>() < 0) {
    return Status::InvalidArgument("random_crop: padding: expected 0 or more pixels, got " +
                                   padding.dump());
  }
  out.padding = padding.get<int64_t>();
  const nlohmann::json seed = args.value("seed", nlohmann::json(0));
  if (!seed.is_number_integer()) {
    return Status::InvalidArgument("random_crop: seed: expected an integer, got " + seed.dump());
  }
  out.seed = seed.is_number_unsigned() ? seed.get<uint64_t>()
                                       : static_cast<uint64_t>(seed.get<int64_t>());
  return out;
}

// Crops one row: `in` is H x W x `pixel` bytes, `out` h x w x `pixel`, taken at (top, left) of
// the image padded by `pad` zeros on every side.
void CropRow(const uint8_t* in, int64_t H, int64_t W, int64_t pixel, int64_t pad, int64_t top,
             int64_t left, int64_t h, int64_t w, uint8_t* out) {
  const int64_t out_row = w * pixel;
  // The crop's columns that fall inside the image: [x0, x1) in the crop's coordinates.
  const int64_t x0 = std::max<int64_t>(0, pad - left);
  const int64_t x1 = std::min<int64_t>(w, pad + W - left);
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* dst = out + y * out_row;
    const int64_t src_y = top + y - pad;
    if (src_y < 0 || src_y >= H || x1 <= x0) {
      std::memset(dst, 0, static_cast<size_t>(out_row));
      continue;
    }
    if (x0 > 0) std::memset(dst, 0, static_cast<size_t>(x0 * pixel));
    std::memcpy(dst + x0 * pixel, in + (src_y * W + left + x0 - pad) * pixel,
                static_cast<size_t>((x1 - x0) * pixel));
    if (x1 < w) std::memset(dst + x1 * pixel, 0, static_cast<size_t>((w - x1) * pixel));
  }
}

Result<Block> RandomCrop(const Block& batch, const nlohmann::json& args) {
  RAYD_ASSIGN_OR_RETURN(CropArgs a, ParseCropArgs(args));
  const Column* c = batch.Find(a.column);
  if (c == nullptr) {
    return Status::InvalidArgument("random_crop: no column '" + a.column + "' (the dataset has " +
                                   DescribeSchema(batch.schema()) + ")");
  }
  const std::vector<int64_t>& shape = c->schema.shape;
  if (c->is_bytes()) {
    return Status::InvalidArgument("random_crop: column '" + a.column +
                                   "' holds bytes (encoded images?): crop decoded pixels, "
                                   "[H, W] or [H, W, C]");
  }
  if (shape.size() != 2 && shape.size() != 3) {
    return Status::InvalidArgument("random_crop: column '" + a.column + "' has rows of shape " +
                                   Dims(shape) + ", not an image's [H, W] or [H, W, C]");
  }
  const int64_t H = shape[0], W = shape[1];
  const int64_t padded_h = H + 2 * a.padding, padded_w = W + 2 * a.padding;
  if (a.h > padded_h || a.w > padded_w) {
    return Status::InvalidArgument(
        "random_crop: size " + Dims({a.h, a.w}) + " is larger than column '" + a.column +
        "''s images " + Dims({H, W}) + " padded by " + std::to_string(a.padding) + " (" +
        Dims({padded_h, padded_w}) + ")");
  }
  const int64_t pixel = (shape.size() == 3 ? shape[2] : 1) * static_cast<int64_t>(ItemSize(c->dtype()));
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = a.h;
  out_shape[1] = a.w;

  BlockBuilder out(batch.num_rows());
  auto keep_input = std::make_shared<Block>(batch);  // the untouched columns view its memory
  const int64_t in_bytes = c->RowBytes(), out_bytes = a.h * a.w * pixel;
  for (const Column& other : batch.columns()) {
    if (other.name() != a.column) {
      out.AddColumn(other, keep_input);
      continue;
    }
    uint8_t* to = out.AddFixedForOverwrite({a.column, c->dtype(), out_shape});
    // Epoch 0, and rows made once for every epoch (before a cache step), draw as before epochs
    // were known; each later epoch draws anew.
    const int64_t epoch = TransformEpoch();
    const uint64_t epoch_salt = epoch > 0 ? Mix(static_cast<uint64_t>(epoch)) : 0;
    for (int64_t row = 0; row < batch.num_rows(); ++row) {
      const uint8_t* from = c->data + row * in_bytes;
      const uint64_t r =
          Mix(a.seed ^ epoch_salt ^ HashBytes(from, static_cast<size_t>(in_bytes)));
      const int64_t top = static_cast<int64_t>((r & 0xffffffffULL) % (padded_h - a.h + 1));
      const int64_t left = static_cast<int64_t>((r >> 32) % (padded_w - a.w + 1));
      CropRow(from, H, W, pixel, a.padding, top, left, a.h, a.w, to + row * out_bytes);
    }
  }
  return std::move(out).Finish();
}

const bool registered_random_crop = RegisterBatchMap("random_crop", RandomCrop);

}  // namespace rayd::data::internal::image_transforms
