// Writes the seed corpus of frame_fuzzer: one valid frame of each kind Connection handles, a
// frame split over many segments, and a stream of several frames back to back. The seeds in
// fuzz/corpus/frame/ came from it; rerun after the protocol changes:
//   ninja -C build-fuzz make_frame_seeds && build-fuzz/make_frame_seeds fuzz/corpus/frame

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "rayd/protocol/gcs.capnp.h"
#include "rayd/protocol/rpc.capnp.h"

namespace {

using rayd::proto::Frame;

std::string Bytes(const std::function<void(Frame::Builder)>& fill, uint32_t segment_words = 0) {
  // A tiny fixed segment size forces a multi-segment message.
  capnp::MallocMessageBuilder message(
      segment_words == 0 ? capnp::SUGGESTED_FIRST_SEGMENT_WORDS : segment_words,
      segment_words == 0 ? capnp::SUGGESTED_ALLOCATION_STRATEGY
                         : capnp::AllocationStrategy::FIXED_SIZE);
  fill(message.initRoot<Frame>());
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

capnp::Data::Reader Data(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

void FillNode(rayd::proto::NodeInfo::Builder node) {
  node.setNodeId("0123456789abcdef0123456789abcdef");
  node.setAddress("10.0.0.2:6381");
  node.setHostname("node-1");
  node.setIsHead(false);
  auto total = node.initTotal(2);
  total[0].setName("CPU");
  total[0].setUnits(40000);
  total[1].setName("GPU");
  total[1].setUnits(10000);
  auto labels = node.initLabels(1);
  labels[0].setKey("zone");
  labels[0].setValue("a");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::string nonce(32, '\x5a');
  const std::string proof(32, '\x17');
  auto hello = Bytes([&](Frame::Builder f) {
    auto h = f.initHello();
    h.setProtocolVersion(rayd::proto::PROTOCOL_VERSION);
    h.setNonce(Data(nonce));
    h.setRole("gcs");
  });
  auto auth = Bytes([&](Frame::Builder f) {
    auto a = f.initAuth();
    a.setProtocolVersion(rayd::proto::PROTOCOL_VERSION);
    a.setRole("node");
    a.setProof(Data(proof));
    a.setNonce(Data(nonce));
  });
  auto auth_ok = Bytes([&](Frame::Builder f) {
    auto r = f.initAuthResult();
    r.setOk(true);
    r.setProof(Data(proof));
  });
  auto auth_refused = Bytes([&](Frame::Builder f) {
    auto r = f.initAuthResult();
    r.setOk(false);
    r.setMessage("wrong cluster token");
  });
  auto ping = Bytes([&](Frame::Builder f) {
    f.setId(1);
    f.initRequest().setMethod(rayd::proto::Method::PING);
  });
  auto register_node = Bytes([&](Frame::Builder f) {
    f.setId(2);
    auto r = f.initRequest();
    r.setMethod(rayd::proto::Method::REGISTER_NODE);
    r.setTimeoutMs(5000);
    FillNode(r.getParams().initAs<rayd::proto::RegisterNodeRequest>().initNode());
  });
  auto kv_put_split = Bytes(
      [&](Frame::Builder f) {
        f.setId(3);
        auto r = f.initRequest();
        r.setMethod(rayd::proto::Method::KV_PUT);
        auto p = r.getParams().initAs<rayd::proto::KvPutRequest>();
        p.setNamespace("fun");
        p.setKey("k");
        p.setValue(Data(std::string(100, 'v')));
        p.setOverwrite(true);
      },
      /*segment_words=*/4);
  auto response_ok = Bytes([&](Frame::Builder f) {
    f.setId(2);
    auto r = f.initResponse();
    r.setCode(0);
    FillNode(r.getResult().initAs<rayd::proto::NodeInfo>());
  });
  auto response_error = Bytes([&](Frame::Builder f) {
    f.setId(3);
    auto r = f.initResponse();
    r.setCode(5);
    r.setMessage("method 3 is not served by this node");
  });
  const std::pair<const char*, std::string> seeds[] = {
      {"hello", hello},
      {"auth", auth},
      {"auth_result_ok", auth_ok},
      {"auth_result_refused", auth_refused},
      {"request_ping", ping},
      {"request_register_node", register_node},
      {"request_kv_put_split", kv_put_split},
      {"response_ok", response_ok},
      {"response_error", response_error},
      {"stream_handshake_then_calls", hello + auth + auth_ok + ping + response_error},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name);
      return 1;
    }
  }
  return 0;
}
