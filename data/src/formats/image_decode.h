#pragma once
// Decoding JPEG (libjpeg-turbo's TurboJPEG) and PNG (libpng) into uint8 pixels, height x width
// x channels, row-major, the layout of an image column ([H, W, C]); shared by the `images`
// format, webdataset's `decode: true` and a decode transform.
//
// The decoders are compiled only when data/cmake/images.cmake finds both libraries, which then
// defines RAYD_DATA_IMAGES; code outside data/src/formats/images/ calls them only under that
// define. The options below are header-only, so that a format built without the libraries
// still parses them and can say what it lacks.
//
// Pixels match PIL's decoding (Image.open(f).convert("RGB" or "L")): exactly for PNG, and for
// JPEG when PIL uses the same libjpeg-turbo (within its rounding otherwise). Alpha is dropped
// (not composited), no gamma correction is applied, RGB becomes L with PIL's integer luma
// (ITU-R 601-2: (19595 R + 38470 G + 7471 B + 32768) >> 16), for JPEG too, and a CMYK JPEG
// (Adobe's inverted CMYK) becomes RGB as C x K / 255. One difference: 16-bit PNG samples keep
// their high byte, where PIL clips 16-bit gray at 255. Anything else (GIF, WebP, a truncated or
// corrupt file, one that libjpeg-turbo warns about) is an error whose message starts with
// `where`. All functions are thread-safe.

#include <rayd/base/status.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace rayd::data::internal {

struct DecodedImage {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> pixels;  // height x width x channels
};

struct ImageInfo {
  int64_t height = 0;
  int64_t width = 0;
};

// An image's size from its header alone (cheap: nothing is decoded).
Result<ImageInfo> ReadImageInfo(std::string_view encoded, const std::string& where);

// Decodes a JPEG or PNG (told apart by their magic bytes) into `channels` (3: RGB, 1: L).
Result<DecodedImage> DecodeImage(std::string_view encoded, int channels, const std::string& where);

// Bilinear resize of `in` (in_h x in_w x channels) into `out` (out_h x out_w x channels), pixel
// centres aligned (OpenCV's INTER_LINEAR, PyTorch's align_corners=False; no antialiasing when
// shrinking), rounded to the nearest integer.
void ResizeBilinear(const uint8_t* in, int64_t in_h, int64_t in_w, int64_t channels, uint8_t* out,
                    int64_t out_h, int64_t out_w);

// The image options a format reads from its dataset entry:
//   decode: true|false  decode to uint8 [H, W, C] pixels, or keep the encoded bytes
//   size: [H, W]        every image's size (without it: the first image's)
//   mode: RGB|L         3 or 1 channels (default RGB)
//   resize: true|false  resize (bilinear) an image of another size instead of failing
struct ImageOptions {
  bool decode = true;
  int64_t height = 0;  // 0: not given
  int64_t width = 0;
  int channels = 3;
  bool resize = false;
  // Where height and width came from when no size was given (the first image's path, set by
  // the format), for messages; "" when they are the size option.
  std::string size_from;
  bool has_size() const { return height > 0; }
};

// Parses the options above; InvalidArgument naming the option. size, mode and resize are only
// for decoded images (an error with `decode: false`); resize needs size.
inline Result<ImageOptions> ParseImageOptions(const nlohmann::json& options,
                                              bool decode_by_default) {
  ImageOptions out;
  out.decode = decode_by_default;
  auto flag = [&](const char* key, bool* to) -> Status {
    if (!options.contains(key)) return Status::Ok();
    if (!options[key].is_boolean()) {
      return Status::InvalidArgument(std::string(key) + ": expected true or false, got " +
                                     options[key].dump());
    }
    *to = options[key].get<bool>();
    return Status::Ok();
  };
  RAYD_RETURN_IF_ERROR(flag("decode", &out.decode));
  RAYD_RETURN_IF_ERROR(flag("resize", &out.resize));
  if (options.contains("size")) {
    const nlohmann::json& s = options["size"];
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number_integer() ||
        s[0].get<int64_t>() <= 0 || s[1].get<int64_t>() <= 0) {
      return Status::InvalidArgument(
          "size: expected [height, width] (two positive integers), got " + s.dump());
    }
    out.height = s[0].get<int64_t>();
    out.width = s[1].get<int64_t>();
  }
  if (options.contains("mode")) {
    const nlohmann::json& m = options["mode"];
    if (m == "RGB") {
      out.channels = 3;
    } else if (m == "L") {
      out.channels = 1;
    } else {
      return Status::InvalidArgument("mode: expected RGB or L, got " + m.dump());
    }
  }
  if (!out.decode) {
    for (const char* key : {"size", "mode", "resize"}) {
      if (options.contains(key)) {
        return Status::InvalidArgument(std::string(key) +
                                       ": only for decoded images, and decode is false (the "
                                       "image column holds the encoded bytes)");
      }
    }
  }
  if (out.resize && !out.has_size()) {
    return Status::InvalidArgument("resize: true needs size: [height, width] to resize to");
  }
  return out;
}

// Decodes `encoded` into `out`, options.height x options.width x options.channels bytes. An
// image of another size is an error naming `where`, its size and the expected one, unless
// options.resize. `options` must have a size.
Status DecodeToShape(std::string_view encoded, const ImageOptions& options, uint8_t* out,
                     const std::string& where);

}  // namespace rayd::data::internal
