#include "checkpoint_store.h"

#include <rayd/train/run_directory.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

namespace rayd::train::internal {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointKey = "checkpoint_dir_name";
constexpr const char* kIteration = "training_iteration";
constexpr const char* kTimeThisIter = "time_this_iter_s";
constexpr const char* kTimeTotal = "time_total_s";
constexpr const char* kTimestamp = "timestamp";

}  // namespace

CheckpointStore::CheckpointStore(std::string run_dir, CheckpointConfig config)
    : run_dir_(std::move(run_dir)),
      config_(std::move(config)),
      results_(RunDirectory(run_dir_).ResultFile()) {}

Result<CheckpointStore> CheckpointStore::Open(std::string run_dir, CheckpointConfig config) {
  if (config.score_order != "max" && config.score_order != "min") {
    return Status::InvalidArgument("score_order must be \"max\" or \"min\", got " +
                                   config.score_order);
  }
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::Internal("cannot create " + run_dir + ": " + ec.message());
  CheckpointStore store(std::move(run_dir), std::move(config));

  std::map<int, std::optional<double>> scores;
  std::ifstream results(RunDirectory(store.run_dir_).ResultFile());
  for (std::string line; std::getline(results, line);) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_object()) continue;  // a line cut short by a crash
    store.last_metrics_.clear();
    for (const auto& [key, value] : row.items()) {
      if (value.is_number()) store.last_metrics_[key] = value.get<double>();
    }
    ++store.iterations_;
    store.time_total_s_ = row.value(kTimeTotal, store.time_total_s_);
    if (row.contains(kCheckpointKey) && row[kCheckpointKey].is_string()) {
      std::optional<double> score;
      const std::string& attribute = store.config_.score_attribute;
      if (!attribute.empty() && row.contains(attribute) && row[attribute].is_number()) {
        score = row[attribute].get<double>();
      }
      scores[RunDirectory::CheckpointIndex(row[kCheckpointKey].get<std::string>())] = score;
    }
  }
  for (const auto& entry : fs::directory_iterator(store.run_dir_, ec)) {
    int index = RunDirectory::CheckpointIndex(entry.path().filename().string());
    if (index < 0 || !entry.is_directory()) continue;
    auto score = scores.find(index);
    store.kept_.push_back({index, score == scores.end() ? std::nullopt : score->second});
    store.next_index_ = std::max(store.next_index_, index + 1);
  }
  std::sort(store.kept_.begin(), store.kept_.end(),
            [](const Kept& a, const Kept& b) { return a.index < b.index; });
  return store;
}

std::string CheckpointStore::DirOf(int index) const {
  return RunDirectory(run_dir_).CheckpointDir(index);
}

std::optional<std::string> CheckpointStore::Latest() const {
  if (kept_.empty()) return std::nullopt;
  return DirOf(kept_.back().index);
}

void CheckpointStore::StartAttempt() { last_report_ = std::chrono::steady_clock::now(); }

Result<ReportedResult> CheckpointStore::Persist(const ReportMessage& report,
                                                const nlohmann::json& extra) {
  auto now = std::chrono::steady_clock::now();
  double this_iter = std::chrono::duration<double>(now - last_report_).count();
  last_report_ = now;
  ReportedResult persisted{report.metrics, std::nullopt};
  persisted.metrics[kIteration] = ++iterations_;
  persisted.metrics[kTimeThisIter] = this_iter;
  persisted.metrics[kTimeTotal] = time_total_s_ += this_iter;
  persisted.metrics[kTimestamp] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json row(persisted.metrics);
  for (const auto& [key, value] : extra.items()) row[key] = value;
  if (report.has_checkpoint) {
    int index = next_index_++;
    // Written beside its final name and renamed, so a crash never leaves a partial checkpoint
    // under a name a resume would pick.
    std::string staging = DirOf(index) + ".tmp";
    std::error_code ec;
    fs::remove_all(staging, ec);
    RAYD_RETURN_IF_ERROR(WriteCheckpointDir(staging, report.checkpoint));
    fs::rename(staging, DirOf(index), ec);
    if (ec) return Status::Internal("cannot rename " + staging + ": " + ec.message());
    std::optional<double> score;
    auto found = report.metrics.find(config_.score_attribute);
    // NaN or an infinity (a diverged run) scores as none: pruned first, and alike after a
    // restart, where result.json holds it as null.
    if (found != report.metrics.end() && std::isfinite(found->second)) score = found->second;
    kept_.push_back({index, score});
    row[kCheckpointKey] = RunDirectory::CheckpointName(index);
    persisted.checkpoint = DirOf(index);
  }
  RAYD_RETURN_IF_ERROR(results_.Append(row.dump() + "\n"));
  // A checkpoint is rare and costly already: its line is on disk beside it at once.
  if (report.has_checkpoint) RAYD_RETURN_IF_ERROR(results_.Flush());
  last_metrics_ = persisted.metrics;
  RAYD_RETURN_IF_ERROR(Prune());
  return persisted;
}

Status CheckpointStore::Prune() {
  if (config_.num_to_keep <= 0) return Status::Ok();
  while (kept_.size() > static_cast<size_t>(config_.num_to_keep)) {
    // Never the latest (restarts resume from it). Among the others: with a score attribute,
    // the worst score goes first (unscored ones before any scored); else the oldest.
    auto victim = kept_.begin();
    if (!config_.score_attribute.empty()) {
      bool higher_is_better = config_.score_order == "max";
      auto worse = [&](const Kept& a, const Kept& b) {  // a is worse than b
        if (!a.score || !b.score) return !a.score && b.score;
        return higher_is_better ? *a.score < *b.score : *a.score > *b.score;
      };
      for (auto it = kept_.begin(); it + 1 != kept_.end(); ++it) {
        if (worse(*it, *victim)) victim = it;
      }
    }
    std::error_code ec;
    fs::remove_all(DirOf(victim->index), ec);
    if (ec) return Status::Internal("cannot remove " + DirOf(victim->index) + ": " + ec.message());
    kept_.erase(victim);
  }
  return Status::Ok();
}

}  // namespace rayd::train::internal

namespace rayd::train {

Result<std::string> AddCheckpoint(const std::string& run_dir, const std::string& source) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) return Status::Internal("cannot create " + run_dir + ": " + ec.message());
  int next = 0;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    if (!entry.is_directory()) continue;
    next = std::max(next, RunDirectory::CheckpointIndex(entry.path().filename().string()) + 1);
  }
  const std::string target = RunDirectory(run_dir).CheckpointDir(next);
  // Copied beside its final name and renamed, as Persist writes, so a crash never leaves a
  // partial checkpoint under a name a resume would pick.
  const std::string staging = target + ".tmp";
  fs::remove_all(staging, ec);
  fs::copy(source, staging, fs::copy_options::recursive, ec);
  if (ec) return Status::Internal("copying checkpoint " + source + ": " + ec.message());
  fs::rename(staging, target, ec);
  if (ec) return Status::Internal("cannot rename " + staging + ": " + ec.message());
  return target;
}

}  // namespace rayd::train
