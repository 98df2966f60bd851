#include "tensorboard_sink.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>

namespace rayd::tune::internal {
namespace {

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

void TensorBoardSink::OnResult(const Trial& trial, const Metrics& result) {
  auto it = writers_.find(trial.id);
  if (it == writers_.end()) {
    const std::filesystem::path dir = std::filesystem::path(dir_) / trial.dir_name;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const double now = WallTime();
    const std::string name = "events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) +
                             "." + HostName() + "." + std::to_string(getpid());
    auto writer = EventFileWriter::Create((dir / name).string(), now);
    if (!writer.ok()) {
      std::cerr << "rayd tune: no TensorBoard events for trial " << trial.id << ": "
                << writer.status().message() << "\n";
    }
    it = writers_.emplace(trial.id, writer.ok() ? std::optional(std::move(writer).value())
                                                : std::nullopt)
             .first;
  }
  if (!it->second) return;
  std::vector<std::pair<std::string, double>> scalars;
  scalars.reserve(result.size());
  for (const auto& [metric, value] : result) scalars.emplace_back("ray/tune/" + metric, value);
  auto iteration = result.find("training_iteration");
  const int64_t step = iteration != result.end() ? static_cast<int64_t>(iteration->second)
                                                 : static_cast<int64_t>(trial.history.size());
  Status written = it->second->WriteScalars(step, WallTime(), scalars);
  unflushed_.insert(trial.id);
  if (!written.ok()) {
    std::cerr << "rayd tune: no more TensorBoard events for trial " << trial.id << ": "
              << written.message() << "\n";
    it->second.reset();
  }
}

void TensorBoardSink::OnStatus(const Trial& trial) {
  if (trial.status == TrialStatus::kTerminated || trial.status == TrialStatus::kError) {
    writers_.erase(trial.id);  // its stream writes what it holds as it closes
    unflushed_.erase(trial.id);
  }
}

void TensorBoardSink::OnTick(const SweepView& view) {
  (void)view;
  for (const std::string& id : unflushed_) {
    auto it = writers_.find(id);
    if (it == writers_.end() || !it->second) continue;
    if (Status flushed = it->second->Flush(); !flushed.ok()) {
      std::cerr << "rayd tune: no more TensorBoard events for trial " << id << ": "
                << flushed.message() << "\n";
      it->second.reset();
    }
  }
  unflushed_.clear();
}

}  // namespace rayd::tune::internal
