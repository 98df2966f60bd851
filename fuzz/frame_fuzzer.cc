// libFuzzer target for the RPC frame decoder: arbitrary bytes as they would arrive on a
// connection. Splits them into frames with rayd::rpc::FrameSize exactly as Connection does,
// reads each complete frame with the same ReaderOptions, and walks it the way Connection and
// its handlers do. A kj::Exception (a malformed message) is the expected rejection and a
// non-ok Status the expected refusal of a frame; a crash or a sanitizer report is a bug.

#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rayd/base/frame.h"
#include "rayd/protocol/rpc.capnp.h"

namespace {

using rayd::proto::Frame;

std::string ToString(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

// Reads every field Connection reads, then walks the AnyPointer payloads the way a handler's
// getAs<T>() would (targetSize() follows every pointer under the traversal limit).
size_t WalkFrame(Frame::Reader frame) {
  size_t touched = frame.getId();
  switch (frame.which()) {
    case Frame::HELLO: {
      auto hello = frame.getHello();
      touched += hello.getProtocolVersion();
      touched += ToString(hello.getNonce()).size();
      touched += std::string(hello.getRole().cStr()).size();
      break;
    }
    case Frame::AUTH: {
      auto auth = frame.getAuth();
      touched += auth.getProtocolVersion();
      touched += std::string(auth.getRole().cStr()).size();
      touched += ToString(auth.getProof()).size();
      touched += ToString(auth.getNonce()).size();
      break;
    }
    case Frame::AUTH_RESULT: {
      auto result = frame.getAuthResult();
      touched += result.getOk();
      touched += std::string(result.getMessage().cStr()).size();
      touched += ToString(result.getProof()).size();
      break;
    }
    case Frame::REQUEST: {
      auto request = frame.getRequest();
      touched += static_cast<uint16_t>(request.getMethod());
      touched += request.getTimeoutMs();
      auto params = request.getParams();
      if (!params.isNull()) touched += params.targetSize().wordCount;
      break;
    }
    case Frame::RESPONSE: {
      auto response = frame.getResponse();
      touched += response.getCode();
      touched += std::string(response.getMessage().cStr()).size();
      auto result = response.getResult();
      if (!result.isNull()) touched += result.targetSize().wordCount;
      break;
    }
    default:  // a union member this build does not know: Connection refuses it
      break;
  }
  return touched;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rayd::rpc::Limits limits;  // Connection's defaults
  const char* bytes = reinterpret_cast<const char*>(data);
  size_t pos = 0;
  while (pos < size) {
    auto frame_size = rayd::rpc::FrameSize(bytes + pos, size - pos, limits);
    if (!frame_size.ok()) {
      if (frame_size.status().message().empty()) std::abort();  // refusals say why
      break;
    }
    const size_t frame_bytes = *frame_size;
    if (size - pos < frame_bytes) break;  // Connection would wait for more bytes
    if (frame_bytes == 0 || frame_bytes % 8 != 0) std::abort();  // whole words; the loop moves
    // Word-aligned copy, as Connection gathers each frame.
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(frame_bytes / 8);
    std::memcpy(words.begin(), bytes + pos, frame_bytes);
    pos += frame_bytes;
    const capnp::ReaderOptions options = rayd::rpc::FrameReaderOptions(frame_bytes, limits);
    volatile size_t sink = 0;
    auto maybe_exception = kj::runCatchingExceptions([&] {
      capnp::FlatArrayMessageReader reader(words.asPtr(), options);
      sink = WalkFrame(reader.getRoot<Frame>());
    });
    (void)maybe_exception;  // Connection would close here; going on covers more
    (void)sink;
  }
  return 0;
}
