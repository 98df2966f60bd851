#include "common/client_pool.h"

namespace rayd::core {

rpc::RpcClient& ClientPool::Get(const std::string& address) {
  auto& client = clients_[address];
  if (!client) {
    client = std::make_unique<rpc::RpcClient>(
        loop_, address, options_, nullptr,
        rpc::ReconnectBackoff{Millis(10), Millis(1000), give_up_after_});
    client->Connect();
  }
  return *client;
}

void ClientPool::Drop(const std::string& address) {
  auto it = clients_.find(address);
  if (it == clients_.end()) return;
  std::shared_ptr<rpc::RpcClient> doomed(std::move(it->second));
  clients_.erase(it);
  loop_.Post([doomed] {});
}

}  // namespace rayd::core
