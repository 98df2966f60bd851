// The Trainer: one TrainingRun (training_run.h), driven on the calling thread until it ends.

#include <rayd/train/trainer.h>
#include <rayd/train/training_run.h>

#include <optional>
#include <utility>

namespace rayd::train {

Trainer::Trainer(std::string train_loop_name, nlohmann::json config, ScalingConfig scaling,
                 RunConfig run)
    : train_loop_name_(std::move(train_loop_name)),
      config_(std::move(config)),
      scaling_(std::move(scaling)),
      run_(std::move(run)) {}

Trainer::Trainer(Command command, nlohmann::json config, ScalingConfig scaling, RunConfig run)
    : command_(std::make_shared<Command>(std::move(command))),
      config_(std::move(config)),
      scaling_(std::move(scaling)),
      run_(std::move(run)) {}

TrainResult Trainer::Fit() { return Fit(FitOptions{}); }

TrainResult Trainer::Fit(const FitOptions& options) {
  EventLoop loop;
  std::optional<TrainResult> ended;
  TrainingRun* running = nullptr;
  TrainingRun run(loop, command_ ? TrainingRun::Target(*command_) : train_loop_name_, config_,
                  scaling_, run_, options,
                  {.on_result =
                       [&](const ReportedResult& result) {
                         running->Answer(!options.on_report || options.on_report(result));
                       },
                   .on_done =
                       [&](TrainResult result) {
                         ended = std::move(result);
                         loop.Stop();
                       }});
  running = &run;
  loop.Run();
  return std::move(*ended);
}

}  // namespace rayd::train
