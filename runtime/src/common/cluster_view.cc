#include "common/node_info.h"
#include "rayd/base/rpc.h"
#include "rayd/protocol/gcs.capnp.h"
#include "rayd/runtime/cluster.h"

namespace rayd {

Result<ClusterView> FetchClusterView(const std::string& address, const std::string& token,
                                     Millis timeout) {
  EventLoop loop;
  ClusterView view;
  Status status;
  {
    rpc::RpcClient client(loop, address, rpc::Options{token, "cli"});
    client.Connect();
    status = rpc::CallAndWait(loop, client, proto::Method::GET_CLUSTER_INFO, nullptr, timeout,
                              [&](capnp::AnyPointer::Reader r) {
                                auto info = r.getAs<proto::ClusterInfo>();
                                view.cluster_id = info.getClusterId();
                                view.gcs_address = info.getGcsAddress();
                                view.storage = info.getStorage();
                                view.start_time_ms = info.getStartTimeMs();
                              });
    if (status.ok()) {
      status = rpc::CallAndWait(
          loop, client, proto::Method::GET_ALL_NODES,
          [](capnp::AnyPointer::Builder b) { b.initAs<proto::GetAllNodesRequest>(); }, timeout,
          [&](capnp::AnyPointer::Reader r) {
            for (auto n : r.getAs<proto::GetAllNodesReply>().getNodes()) {
              auto info = runtime::NodeInfoFromProto(n);
              if (info.ok()) view.nodes.push_back(std::move(*info));
            }
          });
    }
    if (status.code() == StatusCode::kDeadlineExceeded && !client.last_error().ok()) {
      status = client.last_error();
    }
  }
  if (!status.ok()) return status;
  return view;
}

}  // namespace rayd
