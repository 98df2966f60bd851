// A train loop of one's own: registered by name when `rayd tune` or a rank loads the library
// (`libraries:` in the YAML), then named by `train_loop:` (or `trainable:`). Each iteration
// reports loss = (x - 2)^2 / iteration: best at x = 2, falling with iterations.
//
// Config keys: x (0), iterations (5).

#include <rayd/train/trainer.h>

#include <map>
#include <string>

namespace {

void Quadratic(const nlohmann::json& config) {
  const double x = config.value("x", 0.0);
  const int iterations = config.value("iterations", 5);
  for (int iteration = 1; iteration <= iterations; ++iteration) {
    const std::map<std::string, double> metrics = {{"loss", (x - 2) * (x - 2) / iteration}};
    rayd::train::Report(metrics);
  }
}

}  // namespace

RAYD_TRAIN_LOOP(Quadratic);
