#pragma once
// The head's web dashboard and cluster-wide /metrics, on a thread and event loop of their own.
//
// It reads the cluster as `rayd status` does, through the GCS's RPC interface (over the
// session's Unix socket), with one persistent connection (runtime::ClusterReader) and no
// blocking reads: the reads a page needs go out at once and the page is answered when the last
// arrives, so a slow page or scraper holds up neither the GCS's loop nor other requests, and
// what the page shows is what the CLI shows. What programs run (a Tuner's sweeps) comes from
// dashboard feeds, a generic KV layout (rayd/runtime/cluster.h) whose schema the runtime does
// not know.
//
// Routes (all token-gated: the cookie set by `/?token=T`, or `Authorization: Bearer T`):
//   /                     the page (runtime/src/head/dashboard/index.html, compiled in; it
//                         renders the "sweep" feeds a Tuner publishes)
//   /api/cluster          nodes, actors, placement groups, jobs
//   /api/<kind>s          every feed of a kind: its summary, less its "detail_only" members
//   /api/<kind>s/<name>   one feed: its summary with "series" and "logs" by item id
//   /metrics              Prometheus text: the cluster's tables, every node's object store,
//                         and the samples each feed asks for

#include <memory>
#include <string>
#include <thread>

#include "rayd/base/status.h"

namespace rayd::head {

struct DashboardOptions {
  std::string host = "127.0.0.1";
  int port = 8265;            // 0: any free port
  std::string gcs_address;    // what the dashboard reads through (e.g. unix:<session>/gcs.sock)
  std::string token;          // the cluster token, which also opens the dashboard
  std::string session_dir;    // where the URL is written (dashboard_url, 0600); "" for nowhere
};

class Dashboard {
 public:
  // Listens and serves on a new thread, and writes the URL into the session directory; fails
  // (with the address) if it cannot listen.
  static Result<std::unique_ptr<Dashboard>> Start(DashboardOptions options);
  ~Dashboard();  // stops serving and joins the thread

  int port() const { return port_; }
  // http://host:port/?token=... : the URL that opens the dashboard.
  std::string url() const;

 private:
  class Impl;
  Dashboard() = default;

  DashboardOptions options_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace rayd::head
