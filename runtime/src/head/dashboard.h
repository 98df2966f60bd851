#pragma once
// The head's web dashboard and cluster-wide /metrics, on a thread of their own.
//
// It reads the cluster as `rayd status` does, through the GCS's RPC interface (over the
// session's Unix socket), so a slow page or scraper never holds the GCS's loop, and what the
// page shows is what the CLI shows. Sweeps come from the KV namespace the Tuner publishes to
// (tune/src/dashboard_feed.cc).
//
// Routes (all token-gated: the cookie set by `/?token=T`, or `Authorization: Bearer T`):
//   /                     the page (runtime/src/head/dashboard/index.html, compiled in)
//   /api/cluster          nodes, actors, placement groups, jobs
//   /api/sweeps           every sweep's summary
//   /api/sweeps/<name>    one sweep: its trials and learning curves
//   /metrics              Prometheus text: the cluster's tables, every node's object store,
//                         trial counts and results per sweep

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
