#include "console_table.h"

#include <algorithm>
#include <iostream>
#include <sstream>

namespace rayd::tune::internal {

void ConsoleTable::OnTick(const SweepView& view) {
  const auto now = std::chrono::steady_clock::now();
  if (!view.finished && last_ != std::chrono::steady_clock::time_point::min() &&
      now - last_ < interval_) {
    return;
  }
  last_ = now;
  const int workers = std::max(trainable_.scaling.num_workers, 1);
  std::ostringstream resources;
  resources << "Resources requested: ";
  if (view.running == 0) resources << "none";
  bool first = true;
  for (const auto& [name, amount] : train::WorkerBundle(trainable_.scaling)) {
    if (view.running == 0) break;
    resources << (first ? "" : ", ") << amount * workers * view.running << " " << name;
    first = false;
  }
  resources << " (" << view.running << " trials x " << workers << " workers running; at most "
            << view.max_concurrent << " at once)";
  std::cout << RenderTable(view.trials, metric_, view.scheduler.Summary(), resources.str(),
                           view.elapsed_s)
            << std::endl;
}

}  // namespace rayd::tune::internal
