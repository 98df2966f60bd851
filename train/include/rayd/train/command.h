#pragma once
// A training job that is a command rather than a train loop compiled into rayd: each rank of
// the gang runs it as a process (a PyTorch DDP script, DeepSpeed, TensorFlow, JAX, Horovod, a shell
// script), started by that rank's actor with the environment its framework's launcher would
// give it. docs/command-trainables.md has the environment of each launcher and the report
// wire.
//
//   rayd::train::Command command{.argv = {"/usr/bin/python3", "train.py"},
//                                .working_dir = "/home/me/job"};
//   rayd::train::Trainer(command, config, {.num_workers = 2}, run).Fit();

#include <map>
#include <string>
#include <vector>

namespace rayd::train {

struct Command {
  // argv[0] is looked up on `path` unless it holds a '/'; a relative argv[0] with a '/' is
  // relative to working_dir, as is every relative path the command itself opens.
  std::vector<std::string> argv;
  // Which launcher's environment each rank gets: "torch" (torchrun's), "deepspeed",
  // "tensorflow" (TF_CONFIG), "jax", "horovod" (horovodrun's Gloo mode, with a rendezvous
  // server per attempt), or "none" (only rayd's own variables).
  std::string launcher = "torch";
  std::string working_dir;                 // absolute; empty: the driver's working directory
  std::map<std::string, std::string> env;  // added to (and overriding) every rank's environment
  // A rank that neither reports nor exits for this long fails the attempt; 0: no limit.
  int report_timeout_s = 0;
  // A stopped rank's process group gets SIGTERM, then SIGKILL after this many seconds.
  int stop_grace_s = 5;
  // The PATH argv[0] is looked up on, and the ranks' PATH; empty: the driver's PATH.
  std::string path;
};

// The launchers Command::launcher may name.
const std::vector<std::string>& Launchers();
// Empty when `command` can be run; else why not, naming the field: no argv, an unknown
// launcher, a working_dir that is not an absolute directory, a negative timeout.
std::string CheckCommand(const Command& command);
// "python3 train.py --lr 0.1": the command as one would type it (for names and logs).
std::string CommandLine(const Command& command);

}  // namespace rayd::train
