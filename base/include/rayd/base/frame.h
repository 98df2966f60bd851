#pragma once
// Framing of the RPC stream: each frame is one Cap'n Proto message in the standard stream
// encoding (a segment table, then the segments). These pure functions are what Connection and
// the frame fuzzer (fuzz/frame_fuzzer.cc) share; neither allocates nor keeps the bytes.

#include <capnp/message.h>

#include <cstddef>

#include "rayd/base/rpc.h"
#include "rayd/base/status.h"

namespace rayd::rpc {

// How many bytes the frame starting at `data` spans, as far as the `avail` bytes there tell:
// fewer than that many are available means "read more and ask again" (the answer then is a
// lower bound that grows as the header arrives); otherwise it is the complete frame's size.
// Only the segment table is read, so an oversized frame is rejected before it is gathered:
// InvalidArgument for more segments than a frame may have, ResourceExhausted for a frame above
// limits.max_frame_bytes. Never throws.
Result<size_t> FrameSize(const char* data, size_t avail, const Limits& limits);

// The options to read one complete frame of `frame_bytes` bytes with: a traversal limit
// proportional to the frame (twice its words, plus slack) and the nesting limit of `limits`.
capnp::ReaderOptions FrameReaderOptions(size_t frame_bytes, const Limits& limits);

}  // namespace rayd::rpc
