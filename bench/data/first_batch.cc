// Time to the first batch: from Trainer::Fit (the driver starting the run) to the first batch
// in a rank, for a C++ train loop and for a Python command trial (bench/data/first_batch_probe.py),
// each on Fashion-MNIST's IDX files and, when given, on a folder of JPEGs (`format: images`,
// random_crop to 56x56 and to_float32: blocks of ~330 images). 2 ranks of 1 CPU, batch 64, on an embedded cluster started once before the
// first Fit; each case runs REPEATS times (a new gang each Fit). bench/data/first_batch.sh runs
// it beside PyTorch's DataLoader.
//
//   first_batch [REPEATS=3] [JPEG_FOLDER]
//
// What the Fit -> first batch interval includes: reserving the gang's placement group, starting
// the rank actors' processes (each re-runs this binary; LibTorch is loaded for the Gloo group a
// run of 2 ranks forms before its loop), the group's rendezvous, the loop (or the Python
// process: its interpreter, `import torch, numpy` and the data client) opening its shard (the
// reader's index: the IDX header and inflating the gzip files; the JPEG folder's listing and
// first image's header), and the first block's read, decode and transforms. The embedded
// cluster's start (Init) is printed apart, and so is this process's start to its first batch
// (exec, loading its libraries, Init and the first Fit). Each rank writes the wall-clock time of
// its first batch to a file; the slower rank's counts.

#include <rayd/api.h>
#include <rayd/train/command.h>
#include <rayd/train/data.h>
#include <rayd/train/trainer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace rt = rayd::train;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This process's start (exec) in unix seconds: /proc's starttime (10 ms ticks since boot) measured
// back from now on the boot clock (/proc/stat's btime is whole seconds).
double ProcessStartUnix() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; starttime is field 22, the 20th after it.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  const double started = std::atof(field.c_str()) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  timespec boot{};
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  return UnixNow() - (static_cast<double>(boot.tv_sec) + boot.tv_nsec * 1e-9 - started);
}

// The C++ loop: takes its shard, waits for the first batch, writes when it came, and stops.
void FirstBatchProbe(const nlohmann::json& config) {
  const double loop_start = UnixNow();
  rayd::data::DatasetShard& shard = rt::GetDatasetShard("train");
  const double opened = UnixNow();
  auto pass = shard.IterBatches({.batch_size = config.value("batch_size", 64), .epoch = 0});
  std::optional<rayd::data::Block> batch = rt::NextBatch(*pass);
  const double first_batch = UnixNow();
  const int rank = rt::GetContext().world_rank;
  std::ofstream(config.at("stamp_dir").get<std::string>() + "/rank" + std::to_string(rank) + ".json")
      << nlohmann::json{{"loop_start", loop_start},
                        {"imported", loop_start},
                        {"opened", opened},
                        {"first_batch", first_batch},
                        {"rows", batch ? batch->num_rows() : 0}}
             .dump();
  rt::Report({{"first_batch_rows", batch ? static_cast<double>(batch->num_rows()) : 0.0}});
}
RAYD_TRAIN_LOOP(FirstBatchProbe);

struct Case {
  std::string name;
  bool python;
  nlohmann::json dataset;
};

// The slower rank's times (unix seconds): its loop's (or Python process's) start, its imports
// done (Python; the C++ loop's start again), its shard opened, its first batch.
struct Stamps {
  double loop_start = 0, imported = 0, opened = 0, first_batch = 0;
};

Stamps ReadStamps(const std::string& dir, int ranks) {
  Stamps s;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r) + ".json");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      std::fprintf(stderr, "first_batch: rank %d wrote no stamp in %s\n", r, dir.c_str());
      std::exit(1);
    }
    if (j["first_batch"].get<double>() < s.first_batch) continue;
    s = {j["loop_start"].get<double>(), j["imported"].get<double>(), j["opened"].get<double>(),
         j["first_batch"].get<double>()};
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const double process_start = ProcessStartUnix();
  rayd::RaydConfig config;
  config.dashboard_port = -1;
  const double init_begin = UnixNow();
  rayd::Init(config, argc, argv);  // a worker re-run of this binary serves here
  const double init_s = UnixNow() - init_begin;
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::string jpegs = argc > 2 ? argv[2] : "";
  const std::string probe = RAYD_FIRST_BATCH_PROBE;  // bench/data/first_batch_probe.py

  const nlohmann::json idx = {
      {"format", "idx"}, {"paths", {"/usr/share/datasets/fashion-mnist/train-*-ubyte.gz"}}};
  nlohmann::json images = {
      {"format", "images"},
      {"paths", {jpegs}},
      {"mode", "L"},
      {"transforms",
       {{{"map_batches", "random_crop"}, {"size", {56, 56}}},
        {{"map_batches", "to_float32"}, {"columns", {"image"}}, {"scale", 1.0 / 255}},
        {{"map_batches", "select_columns"}, {"columns", {"image", "label"}}}}}};
  std::vector<Case> cases = {{"C++ loop, Fashion-MNIST idx", false, idx},
                             {"Python trial, Fashion-MNIST idx", true, idx}};
  if (!jpegs.empty()) {
    cases.push_back({"C++ loop, JPEG folder + crop", false, images});
    cases.push_back({"Python trial, JPEG folder + crop", true, images});
  }

  char dir_template[] = "/tmp/rayd-first-batch-XXXXXX";
  const std::string work = ::mkdtemp(dir_template);
  std::printf("embedded cluster start (Init): %.2f s\n", init_s);
  std::printf("%-36s %s\n", "",
              "Fit -> first batch (s) of each Fit [of which: until the loop (Python: its process) "
              "starts, Python's imports, opening the shard, the first batch]");
  bool first_fit = true;
  int failures = 0;
  for (const Case& c : cases) {
    std::vector<double> took;
    std::string detail;
    for (int rep = 0; rep < repeats; ++rep) {
      const std::string stamps = work + "/" + std::to_string(&c - cases.data()) + "_" +
                                 std::to_string(rep);
      fs::create_directories(stamps);
      const nlohmann::json loop_config = {{"batch_size", 64}, {"stamp_dir", stamps}};
      rt::RunConfig run{.name = "fb" + std::to_string(rep), .storage_path = stamps + "/results"};
      rayd::Result<rayd::data::DatasetSpec> spec = rayd::data::ParseDatasetSpec("train", c.dataset);
      if (!spec.ok()) {
        std::fprintf(stderr, "first_batch: %s\n", spec.status().message().c_str());
        return 1;
      }
      run.datasets = {*spec};
      const rt::ScalingConfig scaling{.num_workers = 2, .resources_per_worker = {{"CPU", 1}}};
      const double fit_start = UnixNow();
      rt::TrainResult result =
          c.python ? rt::Trainer(rt::Command{.argv = {"/usr/bin/python3", probe}, .launcher = "torch"},
                                 loop_config, scaling, run)
                         .Fit()
                   : rt::Trainer("FirstBatchProbe", loop_config, scaling, run).Fit();
      if (!result.ok()) {
        std::fprintf(stderr, "first_batch: %s: %s\n", c.name.c_str(), result.error.c_str());
        ++failures;
        break;
      }
      const Stamps s = ReadStamps(stamps, 2);
      took.push_back(s.first_batch - fit_start);
      char buf[96];
      std::snprintf(buf, sizeof buf, " %.2f [%.2f %.2f %.2f %.2f]", s.first_batch - fit_start,
                    s.loop_start - fit_start, s.imported - s.loop_start, s.opened - s.imported,
                    s.first_batch - s.opened);
      detail += buf;
      if (first_fit) {
        std::printf("process start -> first batch of the first Fit (embedded start included): "
                    "%.2f s\n",
                    s.first_batch - process_start);
        first_fit = false;
      }
    }
    if (took.empty()) continue;
    std::vector<double> sorted = took;
    std::sort(sorted.begin(), sorted.end());
    std::printf("%-36s median %.2f s, first %.2f s:%s\n", c.name.c_str(),
                sorted[sorted.size() / 2], took[0], detail.c_str());
    std::printf("RESULT %s\n", nlohmann::json{{"case", c.name},
                                              {"median_s", sorted[sorted.size() / 2]},
                                              {"first_s", took[0]},
                                              {"each_s", took}}
                                   .dump()
                                   .c_str());
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  rayd::Shutdown();
  return failures == 0 ? 0 : 1;
}
