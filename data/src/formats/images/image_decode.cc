// JPEG and PNG decoding (image_decode.h): TurboJPEG for JPEG, libpng's progressive reader for
// PNG with our own memory source and error handler.
//
// libpng reports errors by longjmp. The two functions that call setjmp (PngStart, PngRows) hold
// no C++ objects and modify no locals after it, so the jump skips no destructor; whatever must
// be freed lives in PngState, in the caller's frame, which the jump never leaves.

#include "../image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

namespace rayd::data::internal {
namespace image_decode {
// A named namespace, not an anonymous one: unity builds put several formats in one unit.

// PIL's own limit (twice Image.MAX_IMAGE_PIXELS): above it a header is far more likely a
// decompression bomb than a photograph.
constexpr int64_t kMaxPixels = 178956970;

// Where decoded pixels of a (height x width) image go: a buffer of height x width x channels.
using PixelsFor = std::function<Result<uint8_t*>(int64_t height, int64_t width)>;

const uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool IsJpeg(std::string_view b) {
  return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xff &&
         static_cast<uint8_t>(b[1]) == 0xd8 && static_cast<uint8_t>(b[2]) == 0xff;
}
bool IsPng(std::string_view b) { return b.size() >= 8 && std::memcmp(b.data(), kPngMagic, 8) == 0; }

// The error for bytes that are neither JPEG nor PNG, naming what they look like.
Status NotJpegOrPng(std::string_view b, const std::string& where) {
  if (b.empty()) return Status::InvalidArgument(where + ": empty (not a JPEG or PNG image)");
  std::string what;
  if (b.starts_with("GIF8")) what = "a GIF";
  if (b.starts_with("BM")) what = "a BMP";
  if (b.size() >= 12 && b.starts_with("RIFF") && b.substr(8, 4) == "WEBP") what = "a WebP";
  if (b.starts_with("II*") || b.starts_with("MM\0*")) what = "a TIFF";
  if (!what.empty()) {
    return Status::InvalidArgument(where + ": " + what + " image; rayd decodes only JPEG and PNG");
  }
  char first[64];
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 8); ++i) {
    std::snprintf(first, sizeof(first), "%s%02x", i ? " " : "", static_cast<uint8_t>(b[i]));
    hex += first;
  }
  return Status::InvalidArgument(where + ": not a JPEG or PNG image (it starts with " + hex + ")");
}

Status Corrupt(const std::string& where, const char* format, const std::string& why) {
  return Status::InvalidArgument(where + ": corrupt " + format + ": " + why);
}

Status CheckPixels(int64_t height, int64_t width, const std::string& where) {
  if (height <= 0 || width <= 0 || height * width > kMaxPixels) {
    return Status::InvalidArgument(where + ": the header says " + std::to_string(height) + " x " +
                                   std::to_string(width) + " pixels (at most " +
                                   std::to_string(kMaxPixels) + " are read)");
  }
  return Status::Ok();
}

// PIL's RGB -> L (ITU-R 601-2 luma in 16-bit fixed point).
inline uint8_t Luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// `n` pixels of `from` channels (1 L, 2 LA, 3 RGB, 4 RGBA) into `to` channels (1 or 3), alpha
// dropped, as PIL's convert does.
void ConvertPixels(const uint8_t* in, int from, uint8_t* out, int to, int64_t n) {
  for (int64_t i = 0; i < n; ++i, in += from, out += to) {
    if (to == 3) {
      if (from >= 3) {
        out[0] = in[0], out[1] = in[1], out[2] = in[2];
      } else {
        out[0] = out[1] = out[2] = in[0];
      }
    } else {
      out[0] = from >= 3 ? Luma(in) : in[0];
    }
  }
}

// ---- JPEG ----

// One TurboJPEG decompressor per thread, reused (it holds libjpeg's state, a few KiB).
struct TurboJpeg {
  tjhandle handle = nullptr;
  ~TurboJpeg() {
    if (handle != nullptr) tjDestroy(handle);
  }
};
tjhandle Decompressor() {
  thread_local TurboJpeg tj;
  if (tj.handle == nullptr) tj.handle = tjInitDecompress();
  return tj.handle;
}

Status DecodeJpeg(std::string_view b, int channels, const std::string& where,
                  const PixelsFor& pixels_for) {
  tjhandle tj = Decompressor();
  if (tj == nullptr) {
    return Status::Internal(where + ": cannot start libjpeg-turbo: " + tjGetErrorStr2(nullptr));
  }
  const auto* data = reinterpret_cast<const unsigned char*>(b.data());
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, b.size(), &width, &height, &subsampling, &colorspace) != 0) {
    return Corrupt(where, "JPEG", tjGetErrorStr2(tj));
  }
  if (width <= 0 || height <= 0) return Corrupt(where, "JPEG", "its header gives no size");
  RAYD_RETURN_IF_ERROR(CheckPixels(height, width, where));
  RAYD_ASSIGN_OR_RETURN(uint8_t * out, pixels_for(height, width));
  // Any warning (a file cut short, extraneous bytes) fails too: its pixels may not be the
  // file's, and a training set is better off without them (or with them counted, on_error: skip).
  const int64_t n = int64_t{height} * width;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  if (!cmyk && (channels == 3 || colorspace == TJCS_GRAY)) {
    if (tjDecompress2(tj, data, b.size(), out, width, 0, height,
                      channels == 3 ? TJPF_RGB : TJPF_GRAY, 0) != 0) {
      return Corrupt(where, "JPEG", tjGetErrorStr2(tj));
    }
    return Status::Ok();
  }
  // L from colour: through RGB and PIL's luma rather than libjpeg's Y, which differs by a few
  // levels. CMYK: libjpeg does not convert it, so take it as Adobe stores it (inverted).
  std::vector<uint8_t> decoded(static_cast<size_t>(n) * (cmyk ? 4 : 3));
  if (tjDecompress2(tj, data, b.size(), decoded.data(), width, 0, height,
                    cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0) {
    return Corrupt(where, "JPEG", tjGetErrorStr2(tj));
  }
  if (!cmyk) {
    ConvertPixels(decoded.data(), 3, out, channels, n);
    return Status::Ok();
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = &decoded[i * 4];
    uint8_t rgb[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>((p[c] * p[3] + 127) / 255);
    ConvertPixels(rgb, 3, out + i * channels, channels, 1);
  }
  return Status::Ok();
}

// ---- PNG ----

struct PngInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t at = 0;
  char error[256] = {0};  // libpng's message, when it fails
};

void OnPngError(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->error, sizeof(input->error), "%s", message);
  png_longjmp(png, 1);
}
void OnPngWarning(png_structp, png_const_charp) {}

void ReadPngBytes(png_structp png, png_bytep to, size_t n) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > input->size - input->at) png_error(png, "the file is truncated");
  std::memcpy(to, input->data + input->at, n);
  input->at += n;
}

// libpng's structures for one image; destroys them.
struct PngState {
  PngInput input;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngState() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

// Reads the header and sets the transforms: palettes to RGB(A), gray below 8 bits to 8 bits,
// 16 bits to their high byte, interlacing undone. Alpha stays (ConvertPixels drops it).
bool PngStart(PngState* s, int64_t* height, int64_t* width, int* channels, size_t* row_bytes) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_set_read_fn(s->png, &s->input, ReadPngBytes);
  png_read_info(s->png, s->info);
  const int color = png_get_color_type(s->png, s->info);
  const int depth = png_get_bit_depth(s->png, s->info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(s->png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(s->png);
  if (depth == 16) png_set_strip_16(s->png);
  png_set_interlace_handling(s->png);
  png_read_update_info(s->png, s->info);
  *height = png_get_image_height(s->png, s->info);
  *width = png_get_image_width(s->png, s->info);
  *channels = png_get_channels(s->png, s->info);
  *row_bytes = png_get_rowbytes(s->png, s->info);
  return true;
}

bool PngRows(PngState* s, png_bytepp rows) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  png_read_image(s->png, rows);
  png_read_end(s->png, nullptr);  // checks the chunks after the pixels too (a cut-short file)
  return true;
}

Status DecodePng(std::string_view b, int channels, const std::string& where,
                 const PixelsFor& pixels_for) {
  PngState s;
  s.input.data = reinterpret_cast<const uint8_t*>(b.data());
  s.input.size = b.size();
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s.input, OnPngError, OnPngWarning);
  if (s.png != nullptr) s.info = png_create_info_struct(s.png);
  if (s.info == nullptr) return Status::Internal(where + ": cannot start libpng");
  int64_t height = 0, width = 0;
  int from = 0;
  size_t row_bytes = 0;
  if (!PngStart(&s, &height, &width, &from, &row_bytes)) {
    return Corrupt(where, "PNG", s.input.error);
  }
  RAYD_RETURN_IF_ERROR(CheckPixels(height, width, where));
  if (row_bytes != static_cast<size_t>(width * from)) {
    return Status::Internal(where + ": libpng gives " + std::to_string(row_bytes) +
                            " bytes a row for " + std::to_string(width) + " x " +
                            std::to_string(from) + " channels");
  }
  RAYD_ASSIGN_OR_RETURN(uint8_t * out, pixels_for(height, width));
  const bool direct = from == channels;
  std::vector<uint8_t> decoded(direct ? 0 : static_cast<size_t>(height) * row_bytes);
  uint8_t* to = direct ? out : decoded.data();
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[y] = to + y * row_bytes;
  if (!PngRows(&s, rows.data())) return Corrupt(where, "PNG", s.input.error);
  if (!direct) ConvertPixels(decoded.data(), from, out, channels, height * width);
  return Status::Ok();
}

Status Decode(std::string_view b, int channels, const std::string& where,
              const PixelsFor& pixels_for) {
  if (channels != 1 && channels != 3) {
    return Status::InvalidArgument(where + ": " + std::to_string(channels) +
                                   " channels asked for (1 or 3 are decoded)");
  }
  if (IsJpeg(b)) return DecodeJpeg(b, channels, where, pixels_for);
  if (IsPng(b)) return DecodePng(b, channels, where, pixels_for);
  return NotJpegOrPng(b, where);
}

}  // namespace image_decode

Result<ImageInfo> ReadImageInfo(std::string_view encoded, const std::string& where) {
  using namespace image_decode;
  if (IsJpeg(encoded)) {
    tjhandle tj = Decompressor();
    if (tj == nullptr) return Status::Internal(where + ": cannot start libjpeg-turbo");
    int width = 0, height = 0, subsampling = 0, colorspace = 0;
    if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(encoded.data()),
                            encoded.size(), &width, &height, &subsampling, &colorspace) != 0) {
      return Corrupt(where, "JPEG", tjGetErrorStr2(tj));
    }
    if (width <= 0 || height <= 0) return Corrupt(where, "JPEG", "its header gives no size");
    return ImageInfo{height, width};
  }
  if (IsPng(encoded)) {
    // The IHDR chunk comes first: length, "IHDR", width, height (big-endian).
    const auto* d = reinterpret_cast<const uint8_t*>(encoded.data());
    if (encoded.size() < 24 || encoded.substr(12, 4) != "IHDR") {
      return Corrupt(where, "PNG", "no IHDR chunk first");
    }
    auto be32 = [](const uint8_t* p) {
      return (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3];
    };
    return ImageInfo{be32(d + 20), be32(d + 16)};
  }
  return NotJpegOrPng(encoded, where);
}

Result<DecodedImage> DecodeImage(std::string_view encoded, int channels, const std::string& where) {
  DecodedImage image;
  RAYD_RETURN_IF_ERROR(image_decode::Decode(
      encoded, channels, where, [&](int64_t height, int64_t width) -> Result<uint8_t*> {
        image.height = height;
        image.width = width;
        image.channels = channels;
        image.pixels.resize(static_cast<size_t>(height * width * channels));
        return image.pixels.data();
      }));
  return image;
}

void ResizeBilinear(const uint8_t* in, int64_t in_h, int64_t in_w, int64_t channels, uint8_t* out,
                    int64_t out_h, int64_t out_w) {
  // Source coordinate of each output pixel's centre, clamped to the edge pixels' centres.
  struct Tap {
    int64_t i0, i1;
    float f;  // weight of i1
  };
  auto taps = [](int64_t in_n, int64_t out_n) {
    std::vector<Tap> t(static_cast<size_t>(out_n));
    const double scale = static_cast<double>(in_n) / static_cast<double>(out_n);
    for (int64_t o = 0; o < out_n; ++o) {
      const double at = std::max(0.0, (static_cast<double>(o) + 0.5) * scale - 0.5);
      const int64_t i = static_cast<int64_t>(at);
      t[o] = i >= in_n - 1 ? Tap{in_n - 1, in_n - 1, 0.0f}
                           : Tap{i, i + 1, static_cast<float>(at - static_cast<double>(i))};
    }
    return t;
  };
  const std::vector<Tap> ys = taps(in_h, out_h), xs = taps(in_w, out_w);
  for (int64_t y = 0; y < out_h; ++y) {
    const uint8_t* row0 = in + ys[y].i0 * in_w * channels;
    const uint8_t* row1 = in + ys[y].i1 * in_w * channels;
    const float fy = ys[y].f;
    for (int64_t x = 0; x < out_w; ++x) {
      const int64_t a = xs[x].i0 * channels, b = xs[x].i1 * channels;
      const float fx = xs[x].f;
      for (int64_t c = 0; c < channels; ++c) {
        const float top = row0[a + c] + (row0[b + c] - row0[a + c]) * fx;
        const float bottom = row1[a + c] + (row1[b + c] - row1[a + c]) * fx;
        const float v = top + (bottom - top) * fy;
        *out++ = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
}

Status DecodeToShape(std::string_view encoded, const ImageOptions& options, uint8_t* out,
                     const std::string& where) {
  std::vector<uint8_t> scratch;
  int64_t got_h = 0, got_w = 0;
  RAYD_RETURN_IF_ERROR(image_decode::Decode(
      encoded, options.channels, where, [&](int64_t height, int64_t width) -> Result<uint8_t*> {
        got_h = height;
        got_w = width;
        if (height == options.height && width == options.width) return out;
        if (!options.resize) {
          const std::string want =
              "[" + std::to_string(options.height) + ", " + std::to_string(options.width) + "]";
          const std::string got = std::to_string(height) + " x " + std::to_string(width);
          if (!options.size_from.empty()) {
            return Status::InvalidArgument(
                where + ": the image is " + got + " (height x width), not " + want +
                " like the first image (" + options.size_from +
                "); set size: [H, W] and resize: true to read images of several sizes");
          }
          return Status::InvalidArgument(where + ": the image is " + got +
                                         " (height x width), not size: " + want +
                                         "; resize: true resizes it");
        }
        scratch.resize(static_cast<size_t>(height * width * options.channels));
        return scratch.data();
      }));
  if (!scratch.empty()) {
    ResizeBilinear(scratch.data(), got_h, got_w, options.channels, out, options.height,
                   options.width);
  }
  return Status::Ok();
}

}  // namespace rayd::data::internal
