#pragma once
// The datasets of a command trainable's rank, served to its process (the Python client's
// rayd.train.get_dataset_shard) by the rank's supervisor, so that no rank process needs
// rayd's readers (or LibTorch) to read data, and the Python batches are the C++ ones.
//
// How it works: the rank actor listens on a Unix socket (RAYD_DATA_SOCKET) while its command
// runs. The process sends one JSON line per request and gets one JSON line back:
//   {"op": "open", "dataset": NAME}      -> {"ok": true, "num_rows": N, "rows_per_epoch": n,
//                                            "columns": [{"name", "dtype", "shape"}]}
//   {"op": "iter", "dataset": NAME, "batch_size": B, "drop_last": false, "epoch": E (-1: next)}
//                                        -> {"ok": true, "epoch": E}
//   {"op": "next", "dataset": NAME, "shared": true, "slots": true, "ahead": true}
//                                        -> {"ok": true, "path": P, "size": S, "wait_s": W}
//                                           or {"ok": true, "shared": {"path", "offset", "length",
//                                               "rows", "columns": [{"name", "dtype", "shape",
//                                               "offset"}]}, "lease": L, "wait_s": W}
//                                           and with a slot, also "slot": {"id", "capacity"}
//                                           or {"ok": true, "end": true}
// Any request may carry "release": [L, ...]. Replies come in the order of the requests, so the
// process may send one before reading the replies to those before it. The Python client asks for
// each batch ahead, while its loop still trains on the one before, and says so ("ahead"): a
// checkpoint then records the position after the batches handed out but that last one (the
// loop's, not the server's). Reports come to the rank's actor by another way, so before a report
// with a checkpoint the client waits for the replies to its requests sent ahead: the server has
// then read them. Without "ahead", a batch counts as taken when it is handed out.
//
// Zero-copy where the block is in the node's object store (made by a data task or a transform
// stage, viewed there by this process): with "shared", the process maps the same pages itself
// (the store's memfd through /proc/<pid>/fd/<fd>, copy-on-write) and its arrays view them; the
// server keeps the batch's block, and so its object, until the process releases the lease (when
// its arrays are gone) or disconnects. Otherwise, with "slots", a batch is copied into one of a
// few memfds the server reuses (batch_slots.h): the process maps each slot once, shared and
// writable, and keeps it mapped; a slot is the batch's alone until the process releases its
// lease, as above. Where no slot is free (the process holds them all), for bytes columns, and
// for a client that does not ask for slots, a batch is a block (data/FORMAT.md) written to a file
// in /dev/shm that the process maps; the server removes the file when the process asks for the
// next batch of that dataset or disconnects (the mapping stays valid). Errors come back as
// {"ok": false, "error": MESSAGE} naming the file and row, as in C++.
//
// Threading: one thread of its own, serving one connection at a time; destroying the server
// stops it and removes its files.

#include <rayd/base/status.h>

#include <map>
#include <memory>
#include <string>

namespace rayd::train::internal {

class DataServer {
 public:
  // Serves `datasets_json` (DatasetsToJson) sharded for rank `rank` of `world_size` at
  // `socket_path`.
  // `resume_dir`: the checkpoint the attempt resumes from ("" for none); each dataset opens
  // where it recorded the dataset (datasets.h).
  static Result<std::unique_ptr<DataServer>> Start(const std::string& socket_path,
                                                   const std::string& datasets_json, int world_size,
                                                   int rank, int local_world_size,
                                                   const std::string& resume_dir,
                                                   const std::string& run_name);
  ~DataServer();

  // Records where the datasets the process has opened stand in checkpoint directory `dir`
  // (rank 0's report, before the checkpoint is taken). Any thread.
  Status WritePositions(const std::string& dir);
  // Publishes the datasets' feed now (a report; data_feed.h) and returns the node cache's
  // columns (DataFeed::CacheColumns); with `rank_waits` (rank 0), each rank's wait too. The server also publishes while it serves batches, at
  // most every DataFeed::kEverySeconds, and at the end of each pass. Any thread.
  std::map<std::string, double> PublishFeed(bool rank_waits);

 private:
  class Impl;
  explicit DataServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayd::train::internal
