#include "rayd/base/frame.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace rayd::rpc {
namespace {

constexpr uint32_t kMaxSegments = 512;
constexpr size_t kSegmentCountBytes = 4;

}  // namespace

Result<size_t> FrameSize(const char* data, size_t avail, const Limits& limits) {
  if (avail < kSegmentCountBytes) return kSegmentCountBytes;
  uint32_t segment_count_minus_one;
  std::memcpy(&segment_count_minus_one, data, 4);
  if (segment_count_minus_one >= kMaxSegments) {
    return Status::InvalidArgument(
        "malformed frame: " + std::to_string(segment_count_minus_one + 1ull) + " segments");
  }
  const uint32_t segments = segment_count_minus_one + 1;
  // The table (count + one size per segment) is padded to a whole word.
  const size_t header_bytes = (4 + 4 * segments + 7) & ~size_t{7};
  if (avail < header_bytes) return header_bytes;
  uint64_t body_words = 0;  // at most 512 * 2^32 words: no overflow
  for (uint32_t i = 0; i < segments; ++i) {
    uint32_t size;
    std::memcpy(&size, data + 4 + 4 * i, 4);
    body_words += size;
  }
  const uint64_t frame_bytes = header_bytes + body_words * 8;
  if (frame_bytes > limits.max_frame_bytes) {
    return Status::ResourceExhausted("frame of " + std::to_string(frame_bytes) +
                                     " bytes exceeds the limit of " +
                                     std::to_string(limits.max_frame_bytes));
  }
  return static_cast<size_t>(frame_bytes);
}

capnp::ReaderOptions FrameReaderOptions(size_t frame_bytes, const Limits& limits) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = frame_bytes / 8 * 2 + 1024;
  options.nestingLimit = limits.nesting_limit;
  return options;
}

}  // namespace rayd::rpc
