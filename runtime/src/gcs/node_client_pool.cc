#include "gcs/node_client_pool.h"

#include <spdlog/spdlog.h>

namespace rayd::gcs {

NodeClientPool::NodeClientPool(EventLoop& loop, GcsNodeManager& nodes, std::string token)
    : loop_(loop), nodes_(nodes), token_(std::move(token)), reaper_(loop) {
  nodes_.AddNodeDeathListener([this](const runtime::NodeInfo& info) { Drop(info.node_id); });
}

NodeClientPool::~NodeClientPool() {
  reaper_.Stop();
  // Destroying a client fails its queued calls; do it while every member still exists.
  auto retired = std::move(retired_);
  retired.clear();
  auto clients = std::move(clients_);
  clients.clear();
}

rpc::RpcClient* NodeClientPool::Client(const NodeId& node) {
  auto it = clients_.find(node);
  if (it == clients_.end()) {
    const runtime::NodeInfo* info = nodes_.FindAlive(node);
    if (info == nullptr) return nullptr;
    auto client =
        std::make_unique<rpc::RpcClient>(loop_, info->address, rpc::Options{token_, "gcs"});
    client->Connect();
    it = clients_.emplace(node, std::move(client)).first;
  }
  return it->second.get();
}

Status NodeClientPool::NotAlive(const NodeId& node) {
  return Status::Unavailable("node " + node.Hex() + " is not alive");
}

bool NodeClientPool::Connected(const NodeId& node) const {
  auto it = clients_.find(node);
  return it != clients_.end() && it->second->connected();
}

void NodeClientPool::Drop(const NodeId& node) {
  auto it = clients_.find(node);
  if (it == clients_.end()) return;
  retired_.push_back(std::move(it->second));
  clients_.erase(it);
  reaper_.Start(Millis(0), Millis(0), [this] {
    auto retired = std::move(retired_);
    retired_.clear();
    retired.clear();  // may run callbacks that retire more clients: they wait for the next turn
  });
}

}  // namespace rayd::gcs
