#include "horovod_rendezvous.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string_view>

#include "launcher_env.h"

namespace rayd::train::internal {
namespace {

constexpr std::string_view kProcessSetSuffix = "_process_set_hash_";
// A rank's PUTs are its host name and Gloo address: a few dozen bytes.
constexpr size_t kMaxValue = 64 * 1024;

http::Response Answer(int status, std::string body = "") {
  http::Response response = http::Response::Text(status, std::move(body));
  response.content_type = "application/octet-stream";
  return response;
}

}  // namespace

std::vector<HorovodPlace> HorovodLayout(const std::vector<int>& rank_nodes,
                                        const std::vector<std::string>& endpoints) {
  std::map<int, int> on_node;           // ranks on each node
  std::map<int, std::string> host;      // each node's address
  std::map<std::string, int> nodes_at;  // nodes at each address
  for (size_t rank = 0; rank < rank_nodes.size(); ++rank) {
    const int node = rank_nodes[rank];
    if (on_node[node]++ == 0) {
      host[node] = HostOf(endpoints.at(rank));
      ++nodes_at[host[node]];
    }
  }
  std::vector<HorovodPlace> places;
  std::map<int, int> seen;
  for (const int node : rank_nodes) {
    HorovodPlace place;
    place.hostname = host[node];
    if (nodes_at[place.hostname] > 1) place.hostname += "-" + std::to_string(node);
    place.local_rank = seen[node]++;
    place.local_size = on_node[node];
    // Cross: the nodes (in node order) that hold a rank of this local rank.
    place.cross_size = 0;
    for (const auto& [other, count] : on_node) {
      if (count <= place.local_rank) continue;
      if (other < node) ++place.cross_rank;
      ++place.cross_size;
    }
    places.push_back(std::move(place));
  }
  return places;
}

std::map<std::string, int> HorovodScopes(const std::vector<HorovodPlace>& places) {
  std::map<std::string, int> sizes;
  sizes["global"] = static_cast<int>(places.size());
  for (const HorovodPlace& place : places) {
    sizes["local_" + place.hostname] = place.local_size;
    sizes["cross_" + std::to_string(place.local_rank)] = place.cross_size;
  }
  return sizes;
}

HorovodStore::HorovodStore(std::map<std::string, int> scope_sizes)
    : sizes_(std::move(scope_sizes)) {}

int HorovodStore::SizeOf(const std::string& scope) const {
  auto it = sizes_.find(scope.substr(0, scope.find(kProcessSetSuffix)));
  return it == sizes_.end() ? 0 : it->second;
}

http::Response HorovodStore::Handle(const http::Request& request) {
  const size_t slash = request.path.find('/', 1);
  if (request.path.size() < 2 || slash == std::string::npos || slash + 1 == request.path.size()) {
    return Answer(400, "expected /<scope>/<key>, got " + request.path + "\n");
  }
  const std::string scope = request.path.substr(1, slash - 1);
  const std::string key = request.path.substr(slash + 1);
  if (request.method == "PUT") {
    if (request.body.size() > kMaxValue) return Answer(413);
    values_[scope][key] = request.body;
    return Answer(200);
  }
  if (request.method == "GET" || request.method == "HEAD") {
    auto in = values_.find(scope);
    if (in == values_.end()) return Answer(404);
    auto value = in->second.find(key);
    return value == in->second.end() ? Answer(404) : Answer(200, value->second);
  }
  // DELETE /<scope>/<rank>: that rank is done with the scope; the last one empties it.
  std::set<std::string>& finished = finished_[scope];
  finished.insert(key);
  const int size = SizeOf(scope);
  if (size > 0 && static_cast<int>(finished.size()) >= size) {
    values_.erase(scope);
    finished_.erase(scope);
    ++cleared_[scope];
  }
  return Answer(200);
}

std::string HorovodStore::Waiting() const {
  std::string out;
  for (const auto& [scope, values] : values_) {
    const int size = SizeOf(scope);
    std::vector<int> came;
    std::string missing;
    for (int rank = 0; rank < size; ++rank) {
      if (values.count("rank_" + std::to_string(rank))) {
        came.push_back(rank);
      } else {
        missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
      }
    }
    if (size == 0 || missing.empty()) continue;
    out += (out.empty() ? "" : "; ") + std::string("scope ") + scope + " has " +
           std::to_string(came.size()) + " of " + std::to_string(size) + " ranks (rank" +
           (size - came.size() > 1 ? "s " : " ") + missing + " never came)";
  }
  return out;
}

int HorovodStore::Cleared(const std::string& scope) const {
  auto it = cleared_.find(scope);
  return it == cleared_.end() ? 0 : it->second;
}

HorovodRendezvous::HorovodRendezvous(std::map<std::string, int> scope_sizes,
                                     std::set<std::string> peer_hosts)
    : store_(std::move(scope_sizes)), peer_hosts_(std::move(peer_hosts)) {}

Result<std::unique_ptr<HorovodRendezvous>> HorovodRendezvous::Start(
    const std::string& host, int port, std::map<std::string, int> scope_sizes,
    std::set<std::string> peer_hosts) {
  std::unique_ptr<HorovodRendezvous> self(
      new HorovodRendezvous(std::move(scope_sizes), std::move(peer_hosts)));
  HorovodRendezvous* raw = self.get();
  self->server_ = std::make_unique<http::HttpServer>(
      self->loop_,
      [raw](const http::Request& request, http::Respond respond) { raw->Serve(request, respond); },
      http::HttpServer::Options{.max_body = kMaxValue});
  // Listening here, before the thread runs the loop: the port is open when Start returns, so a
  // rank started after it never finds it closed (Horovod gives up after 3 refused tries).
  RAYD_RETURN_IF_ERROR(self->server_->Listen(host, port));
  self->address_ = host + ":" + std::to_string(self->server_->port());
  self->thread_ = std::thread([raw] { raw->loop_.Run(); });
  return self;
}

Result<std::unique_ptr<HorovodRendezvous>> HorovodRendezvous::ForGang(
    const std::vector<int>& rank_nodes, const std::vector<std::string>& endpoints) {
  if (endpoints.empty() || rank_nodes.size() != endpoints.size()) {
    return Status::InvalidArgument(std::to_string(rank_nodes.size()) + " nodes for " +
                                   std::to_string(endpoints.size()) + " ranks");
  }
  std::set<std::string> peers;
  for (const std::string& endpoint : endpoints) peers.insert(HostOf(endpoint));
  const std::string& mine = endpoints[0];
  return Start(HostOf(mine), std::atoi(mine.c_str() + HostOf(mine).size() + 1),
               HorovodScopes(HorovodLayout(rank_nodes, endpoints)), std::move(peers));
}

HorovodRendezvous::~HorovodRendezvous() {
  if (thread_.joinable()) {
    loop_.Post([this] {
      server_->Close();
      loop_.Stop();
    });
    thread_.join();
  }
  server_.reset();
}

void HorovodRendezvous::Serve(const http::Request& request, const http::Respond& respond) {
  if (!peer_hosts_.count(HostOf(request.peer))) {
    spdlog::warn("horovod rendezvous {}: refused {} {} from {}, not a node of the gang", address_,
                 request.method, request.path, request.peer);
    return respond(Answer(403, "not a node of this job\n"));
  }
  std::lock_guard lock(mu_);
  respond(store_.Handle(request));
}

std::string HorovodRendezvous::Waiting() {
  std::lock_guard lock(mu_);
  std::string waiting = store_.Waiting();
  return waiting.empty() ? "" : "Horovod's rendezvous at " + address_ + ": " + waiting;
}

}  // namespace rayd::train::internal
