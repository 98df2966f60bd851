// RecordIds and its readers (record_ids.h).
#include "record_ids.h"

#include <rayd/train/data.h>
#include <rayd/train/trainer.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

namespace rayd::testing {
namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;

void RecordIds(const nlohmann::json& config) {
  const int rank = rt::GetContext().world_rank, world = rt::GetContext().world_size;
  int generation = 0;
  std::vector<std::string> carried;  // earlier attempts' files, in the restored checkpoint
  if (std::optional<std::string> checkpoint = rt::GetCheckpoint()) {
    std::ifstream(*checkpoint + "/generation") >> generation;
    ++generation;
    for (const auto& e : fs::directory_iterator(*checkpoint)) {
      if (e.path().filename().string().rfind("ids_", 0) == 0) carried.push_back(e.path().string());
    }
  }
  rayd::data::DatasetShard& shard = rt::GetDatasetShard("ids");
  nlohmann::json mine = nlohmann::json::array();
  auto report = [&](int epoch, int step) {
    const std::string dir = rt::NewCheckpointDir();
    std::ofstream(dir + "/ids_g" + std::to_string(generation) + "_r" + std::to_string(rank) +
                  ".json")
        << mine.dump();
    if (rank == 0) {
      std::ofstream(dir + "/generation") << generation;
      for (const std::string& f : carried) fs::copy_file(f, dir + "/" + fs::path(f).filename().string());
    }
    rt::Report({{"epoch", epoch}, {"step", step}, {"generation", generation}}, dir);
  };
  const int epochs = config.value("epochs", 3);
  const int64_t batch_size = config.value("batch_size", 4);
  const auto pace = std::chrono::milliseconds(config.value("pace_ms", 0));
  while (shard.next_epoch() < epochs) {
    const int epoch = static_cast<int>(shard.next_epoch());
    auto pass = shard.IterBatches({.batch_size = batch_size});
    int step = 0;
    while (std::optional<rayd::data::Block> batch = rt::NextBatch(*pass)) {
      const rayd::data::Column* id = batch->Find("id");
      for (int64_t r = 0; r < batch->num_rows(); ++r) mine.push_back({epoch, id->As<int64_t>()[r]});
      ++step;
      for (const nlohmann::json& f : config.value("fail_at", nlohmann::json::array())) {
        const std::string marker = f[2].get<std::string>();
        if (rank == world - 1 && f[0] == epoch && f[1] == step && !fs::exists(marker)) {
          std::ofstream(marker) << "failed here\n";
          throw std::runtime_error("injected failure at epoch " + std::to_string(epoch) + " step " +
                                   std::to_string(step));
        }
      }
      if (pace.count() > 0) std::this_thread::sleep_for(pace);
      if (step % 2 == 0) report(epoch, step);
    }
    report(epoch, step);
  }
}
RAYD_TRAIN_LOOP(RecordIds);

}  // namespace

std::map<int, std::vector<int64_t>> IdsByEpoch(const std::string& checkpoint_dir, int* files) {
  std::map<int, std::vector<int64_t>> by_epoch;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(checkpoint_dir)) {
    if (e.path().filename().string().rfind("ids_", 0) == 0) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  if (files != nullptr) *files = static_cast<int>(paths.size());
  for (const fs::path& path : paths) {
    std::ifstream in(path);
    for (const nlohmann::json& taken : nlohmann::json::parse(in)) {
      by_epoch[taken[0].get<int>()].push_back(taken[1].get<int64_t>());
    }
  }
  return by_epoch;
}

std::string WriteIdsCsv(const std::string& dir, int rows) {
  const std::string path = dir + "/ids.csv";
  std::ofstream csv(path);
  csv << "id\n";
  for (int i = 0; i < rows; ++i) csv << i << "\n";
  return path;
}

std::string LatestCheckpoint(const std::string& run_dir) {
  std::string last;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint_", 0) == 0 &&
        (last.empty() || name > fs::path(last).filename().string())) {
      last = e.path().string();
    }
  }
  return last;
}

}  // namespace rayd::testing
