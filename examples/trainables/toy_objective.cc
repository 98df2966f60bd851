// toy_objective: a function trainable without a model, for quick sweeps and tests of the
// schedulers. Each iteration reports
//   loss = ((x - 3)^2 + (y + 1)^2 + 0.1) / (1 + lr * iteration)
// so configs near x = 3, y = -1 with a high lr are best, and loss falls with iterations. State
// (the iteration) is checkpointed each iteration; a resumed or cloned trial continues from its
// checkpoint and reports the iteration it restored in `restored_iteration` (0 when fresh).
//
// Config keys (all optional): x (0), y (0), lr (0.1), iterations (10), checkpoint (true),
// work_ms (0: how long each iteration pretends to work, so trials overlap like real ones).

#include <rayd/train/trainer.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

void ToyObjective(const nlohmann::json& config) {
  const double x = config.value("x", 0.0);
  const double y = config.value("y", 0.0);
  const double lr = config.value("lr", 0.1);
  const int iterations = config.value("iterations", 10);
  const bool checkpoint = config.value("checkpoint", true);
  const int work_ms = config.value("work_ms", 0);

  int iteration = 0;
  if (std::optional<std::string> restored = rayd::train::GetCheckpoint()) {
    std::ifstream(*restored + "/iteration") >> iteration;
  }
  const int restored_iteration = iteration;
  const fs::path staging = fs::temp_directory_path() / ("rayd_toy_" + std::to_string(::getpid()));
  // Gone however the loop ends: a trial a scheduler stops leaves it by an exception from Report.
  struct RemoveStaging {
    fs::path path;
    ~RemoveStaging() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } remove_staging{staging};
  while (iteration < iterations) {
    ++iteration;
    if (work_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
    double loss = ((x - 3) * (x - 3) + (y + 1) * (y + 1) + 0.1) / (1 + lr * iteration);
    std::map<std::string, double> metrics = {
        {"loss", loss}, {"iteration", iteration}, {"restored_iteration", restored_iteration}};
    if (!checkpoint) {
      rayd::train::Report(metrics);
      continue;
    }
    fs::create_directories(staging);
    std::ofstream(staging / "iteration") << iteration;
    rayd::train::Report(metrics, staging.string());
    fs::remove_all(staging);
  }
}

const bool registered_toy_objective = rayd::train::RegisterTrainLoop("toy_objective", ToyObjective);

}  // namespace
