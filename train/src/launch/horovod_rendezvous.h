#pragma once
// What Horovod's launcher (horovodrun) gives a Gloo job, given by rayd instead: each rank's place
// as Horovod counts it, and the HTTP key-value server its ranks meet through to find each
// other's Gloo addresses (`hvd.init()`). The protocol, read from Horovod's
// common/gloo/http_store.cc and runner/http/http_server.py (../shared/horovod/README.md):
//
// - One request per connection; the URL is /<scope>/<key>; values are raw bytes.
// - PUT stores (200), GET answers the value (200) or 404 while it is not there (the rank polls
//   every 10 ms until its Gloo timeout), DELETE /<scope>/<rank> is that rank's "finished with
//   the scope"; once every rank of a scope has said so the scope is emptied, so a script that
//   calls hvd.init() again meets in a clean one.
// - The scopes: `global` (every rank), `local_<HOROVOD_HOSTNAME>` (the ranks of one node),
//   `cross_<HOROVOD_LOCAL_RANK>` (one rank of that local rank per node), and each of them again
//   with `_process_set_hash_<hex>` appended (the global process set's), sized like its base.
//
// One server per attempt, started on rank 0's node before any rank starts and stopped with the
// attempt (train_worker.cc): a restarted attempt meets in a fresh one.

#include <rayd/base/event_loop.h>
#include <rayd/base/http.h>
#include <rayd/base/status.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace rayd::train::internal {

// A rank's place in a Horovod job.
struct HorovodPlace {
  // HOROVOD_HOSTNAME, which only names the node's local scope: the node's address, with
  // "-<node>" added when two nodes of the gang share one (several rayd nodes on one machine).
  std::string hostname;
  int local_rank = 0;  // among the ranks on its node, by world rank
  int local_size = 1;
  int cross_rank = 0;  // its node's index among the nodes that hold that local rank
  int cross_size = 1;
};

// Every rank's place, from each rank's node (`rank_nodes`, numbered 0.. by first appearance)
// and each rank's reserved "host:port" (`endpoints`), both by world rank and of equal size.
std::vector<HorovodPlace> HorovodLayout(const std::vector<int>& rank_nodes,
                                        const std::vector<std::string>& endpoints);

// How many ranks meet in each scope: "global", "local_<hostname>", "cross_<local rank>".
std::map<std::string, int> HorovodScopes(const std::vector<HorovodPlace>& places);

// The store behind the rendezvous: a pure request -> response function, so the protocol is
// tested without sockets. Not thread-safe.
class HorovodStore {
 public:
  explicit HorovodStore(std::map<std::string, int> scope_sizes);

  http::Response Handle(const http::Request& request);
  // The scopes some rank has joined and others have not: "scope global has ranks 0 of 2
  // (rank 1 never came)"; empty when none is waiting. For the error of a failed attempt.
  std::string Waiting() const;
  // How many times `scope` was emptied after all its ranks finished with it (tests).
  int Cleared(const std::string& scope) const;

 private:
  // The size of `scope` (a process set's scope is sized like its base), 0 if unknown.
  int SizeOf(const std::string& scope) const;

  const std::map<std::string, int> sizes_;
  std::map<std::string, std::map<std::string, std::string>> values_;  // by scope, then key
  std::map<std::string, std::set<std::string>> finished_;  // by scope: ranks that said DELETE
  std::map<std::string, int> cleared_;
};

// A HorovodStore served over HTTP on its own thread (its own event loop) for one attempt, on
// host:port. Only peers at `peer_hosts` (the gang's node addresses) are answered; others get
// 403. Thread-safe; stops when destroyed.
class HorovodRendezvous {
 public:
  static Result<std::unique_ptr<HorovodRendezvous>> Start(const std::string& host, int port,
                                                          std::map<std::string, int> scope_sizes,
                                                          std::set<std::string> peer_hosts);
  // The attempt's: on rank 0's endpoint (endpoints[0]), sized from the gang's placement
  // (rank_nodes and endpoints by world rank, as RankLaunch has them), answering its nodes only.
  static Result<std::unique_ptr<HorovodRendezvous>> ForGang(
      const std::vector<int>& rank_nodes, const std::vector<std::string>& endpoints);
  ~HorovodRendezvous();
  HorovodRendezvous(const HorovodRendezvous&) = delete;
  HorovodRendezvous& operator=(const HorovodRendezvous&) = delete;

  const std::string& address() const { return address_; }
  // HorovodStore::Waiting, prefixed with where the rendezvous is; empty when none waits.
  std::string Waiting();

 private:
  HorovodRendezvous(std::map<std::string, int> scope_sizes, std::set<std::string> peer_hosts);
  void Serve(const http::Request& request, const http::Respond& respond);

  // Member order is destruction order reversed: the server closes before its loop goes.
  std::mutex mu_;
  HorovodStore store_;  // guarded by mu_
  const std::set<std::string> peer_hosts_;
  std::string address_;
  EventLoop loop_;
  std::unique_ptr<http::HttpServer> server_;
  std::thread thread_;
};

}  // namespace rayd::train::internal
