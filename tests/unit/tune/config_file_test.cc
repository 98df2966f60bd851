// tune.yaml and train.yaml: the ARCHITECTURE.md example and every scheduler parse into the
// expected structs; each kind of mistake fails with the file, the line and the key path.

#include <rayd/tune/config_file.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

#include "test_util.h"

namespace rayd::tune {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using nlohmann::json;
using rayd::testing::TempDir;

// ARCHITECTURE.md §10's example, verbatim but for the library path.
constexpr char kArchitectureExample[] = R"(# tune.yaml
name: mlp-asha
trainable: mlp_classifier          # a registered train loop
libraries: [build/examples/libexample_trainables.so]   # optional
scaling: {num_workers: 2, use_gpu: false, resources_per_worker: {CPU: 1}}
param_space:
  lr: {loguniform: [1.0e-4, 1.0e-1]}
  hidden: {grid_search: [64, 128]}
  batch_size: {choice: [32, 64]}
  momentum: 0.9                    # a plain value is a constant
tune:
  metric: loss
  mode: min
  num_samples: 8                   # grid_search values are each repeated num_samples times
  max_concurrent_trials: 4         # optional: derived from the cluster when absent
  seed: 42                         # optional: reproducible sampling and perturbation
  stop: {training_iteration: 20}   # optional: stop a trial when any reported metric reaches this
  scheduler: {type: asha, time_attr: training_iteration, max_t: 20, grace_period: 1, reduction_factor: 3}
  # or {type: pbt, time_attr: training_iteration, perturbation_interval: 2, quantile_fraction: 0.25,
  #     resample_probability: 0.25, hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-1]}}}
  # or {type: fifo} | {type: hyperband, ...} | {type: median_stopping, ...}
run:
  storage_path: ./rayd_results
  failure: {max_failures: 2}
  checkpoint: {num_to_keep: 2}
)";

// The message ParseTuneFile throws for `text` ("" when it parses).
std::string TuneError(const std::string& text) {
  try {
    ParseTuneFile(text, "tune.yaml");
  } catch (const ConfigFileError& e) {
    return e.what();
  }
  return "";
}

std::string TrainError(const std::string& text) {
  try {
    ParseTrainFile(text, "train.yaml");
  } catch (const ConfigFileError& e) {
    return e.what();
  }
  return "";
}

// A minimal valid tune.yaml followed by `rest`; the header is lines 1-2.
std::string Tune(const std::string& rest) { return "name: t\ntrainable: loop\n" + rest; }

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

TEST_CASE("The ARCHITECTURE tune.yaml example loads into the expected structs", "[tune]") {
  TempDir dir;
  const std::string path = dir.path() + "/tune.yaml";
  WriteFile(path, kArchitectureExample);
  TuneFile f = LoadTuneFile(path);

  CHECK(f.path == path);
  CHECK(f.name == "mlp-asha");
  CHECK(f.run.name == "mlp-asha");
  CHECK(f.trainable.train_loop == "mlp_classifier");
  REQUIRE(f.libraries.size() == 1);
  CHECK(f.libraries[0] == dir.path() + "/build/examples/libexample_trainables.so");

  const rayd::train::ScalingConfig& s = f.trainable.scaling;
  CHECK(s.num_workers == 2);
  CHECK_FALSE(s.use_gpu);
  CHECK(s.resources_per_worker == std::map<std::string, double>{{"CPU", 1.0}});
  CHECK(s.placement_strategy == rayd::PlacementStrategy::PACK);

  REQUIRE(f.param_space.size() == 4);
  CHECK(f.param_space[0].path == std::vector<std::string>{"lr"});
  const auto& lr = std::get<Domain>(f.param_space[0].value);
  CHECK(lr.kind() == Domain::Kind::kLogUniform);
  CHECK(lr.lower() == 1e-4);
  CHECK(lr.upper() == 1e-1);
  const auto& hidden = std::get<Domain>(f.param_space[1].value);
  CHECK(hidden.kind() == Domain::Kind::kGridSearch);
  CHECK(hidden.values() == std::vector<json>{64, 128});
  CHECK(hidden.values()[0].is_number_integer());
  const auto& batch = std::get<Domain>(f.param_space[2].value);
  CHECK(batch.kind() == Domain::Kind::kChoice);
  CHECK(batch.values() == std::vector<json>{32, 64});
  CHECK(f.param_space[3].path == std::vector<std::string>{"momentum"});
  CHECK(std::get<json>(f.param_space[3].value) == 0.9);

  CHECK(f.tune.metric == "loss");
  CHECK(f.tune.mode == "min");
  CHECK(f.tune.num_samples == 8);
  CHECK(f.tune.max_concurrent_trials == 4);
  CHECK(f.tune.seed == std::optional<uint64_t>(42));
  CHECK(f.tune.stop == std::map<std::string, double>{{"training_iteration", 20.0}});
  REQUIRE(std::holds_alternative<AshaConfig>(f.tune.scheduler));
  const auto& asha = std::get<AshaConfig>(f.tune.scheduler);
  CHECK(asha.time_attr == "training_iteration");
  CHECK(asha.max_t == 20);
  CHECK(asha.grace_period == 1);
  CHECK(asha.reduction_factor == 3);
  CHECK(asha.brackets == 1);
  CHECK_FALSE(asha.promotion);

  CHECK(f.run.storage_path == "./rayd_results");
  CHECK(f.run.failure.max_failures == 2);
  CHECK(f.run.failure.max_preemptions == -1);  // unlimited unless given
  CHECK(f.run.checkpoint.num_to_keep == 2);

  // 8 samples x 2 hidden values.
  CHECK(GenerateVariants(f.param_space, f.tune.num_samples, *f.tune.seed).size() == 16);
}

TEST_CASE("A minimal tune.yaml gets the defaults", "[tune]") {
  TuneFile f = ParseTuneFile("name: n\ntrainable: loop\n", "dir/tune.yaml");
  CHECK(f.trainable.scaling.num_workers == 1);
  CHECK(f.trainable.scaling.resources_per_worker.empty());
  CHECK(f.param_space.empty());
  CHECK(std::holds_alternative<FifoConfig>(f.tune.scheduler));
  CHECK(f.tune.num_samples == 1);
  CHECK_FALSE(f.tune.seed.has_value());
  CHECK(f.run.storage_path == "./rayd_results");
  CHECK(f.run.name == "n");
  CHECK(f.libraries.empty());
}

TEST_CASE("Libraries resolve against the file's directory", "[tune]") {
  TuneFile f = ParseTuneFile(Tune("libraries: [lib/a.so, /opt/b.so, ../c.so]\n"),
                             "/etc/rayd/sweeps/tune.yaml");
  CHECK(f.libraries ==
        std::vector<std::string>{"/etc/rayd/sweeps/lib/a.so", "/opt/b.so", "/etc/rayd/c.so"});
  TuneFile here = ParseTuneFile(Tune("libraries: [a.so]\n"), "tune.yaml");
  CHECK(here.libraries[0] == (std::filesystem::current_path() / "a.so").string());
}

TEST_CASE("Param spaces nest and take every domain form", "[tune]") {
  TuneFile f = ParseTuneFile(Tune(R"(param_space:
  optim:
    lr: {uniform: [0, 1]}
    name: sgd
    betas: [0.9, 0.99]
  q: {quniform: [0, 10, 0.5]}
  ql: {qloguniform: [1.0e-4, 1.0e-1, 5.0e-5]}
  ri: {randint: [1, 10]}
  qri: {qrandint: [0, 12, 4]}
  n1: {randn: []}
  n2: {randn: [3, 0.5]}
  g: {grid_search: [true, "64", 1.5, null, {a: 1}, [1, 2], plain]}
  empty: {}
)"),
                             "tune.yaml");
  REQUIRE(f.param_space.size() == 11);
  CHECK(f.param_space[0].path == std::vector<std::string>{"optim", "lr"});
  CHECK(std::get<Domain>(f.param_space[0].value).kind() == Domain::Kind::kUniform);
  CHECK(std::get<json>(f.param_space[1].value) == "sgd");
  CHECK(std::get<json>(f.param_space[2].value) == json::parse("[0.9, 0.99]"));
  CHECK(std::get<Domain>(f.param_space[3].value).ToJson() ==
        json::parse(R"({"quniform": [0.0, 10.0, 0.5]})"));
  CHECK(std::get<Domain>(f.param_space[4].value).kind() == Domain::Kind::kQLogUniform);
  CHECK(std::get<Domain>(f.param_space[5].value).ToJson() ==
        json::parse(R"({"randint": [1, 10]})"));
  CHECK(std::get<Domain>(f.param_space[6].value).ToJson() ==
        json::parse(R"({"qrandint": [0, 12, 4]})"));
  CHECK(std::get<Domain>(f.param_space[7].value).ToJson() ==
        json::parse(R"({"randn": [0.0, 1.0]})"));
  CHECK(std::get<Domain>(f.param_space[8].value).ToJson() ==
        json::parse(R"({"randn": [3.0, 0.5]})"));
  const auto& g = std::get<Domain>(f.param_space[9].value).values();
  REQUIRE(g.size() == 7);
  CHECK(g[0] == true);
  CHECK(g[1] == "64");  // quoted: a string
  CHECK(g[2].is_number_float());
  CHECK(g[3].is_null());
  CHECK(g[4] == json{{"a", 1}});
  CHECK(g[5] == json::parse("[1, 2]"));
  CHECK(g[6] == "plain");
  CHECK(std::get<json>(f.param_space[10].value) == json::object());

  std::vector<json> configs = GenerateVariants(f.param_space, 1, 0);
  REQUIRE(configs.size() == 7);
  CHECK(configs[0]["optim"]["name"] == "sgd");
  CHECK(configs[0]["ri"].is_number_integer());
}

TEST_CASE("Every scheduler type parses with its options", "[tune]") {
  auto scheduler = [](const std::string& yaml) {
    return ParseTuneFile(Tune("tune:\n  metric: loss\n  scheduler: " + yaml + "\n"), "tune.yaml")
        .tune.scheduler;
  };
  CHECK(std::holds_alternative<FifoConfig>(scheduler("{type: fifo}")));
  CHECK(std::holds_alternative<FifoConfig>(scheduler("fifo")));
  CHECK(std::get<AshaConfig>(scheduler("asha")).max_t == 100);

  auto asha = std::get<AshaConfig>(scheduler(
      "{type: asha, max_t: 50, grace_period: 5, reduction_factor: 2, brackets: 3, promotion: true,"
      " stop_last_trials: false, time_attr: time_total_s}"));
  CHECK(asha.max_t == 50);
  CHECK(asha.grace_period == 5);
  CHECK(asha.reduction_factor == 2);
  CHECK(asha.brackets == 3);
  CHECK(asha.promotion);
  CHECK_FALSE(asha.stop_last_trials);
  CHECK(asha.time_attr == "time_total_s");

  auto hb = std::get<HyperBandConfig>(
      scheduler("{type: hyperband, max_t: 27, reduction_factor: 3, stop_last_trials: false}"));
  CHECK(hb.max_t == 27);
  CHECK_FALSE(hb.stop_last_trials);

  auto median = std::get<MedianStoppingConfig>(
      scheduler("{type: median_stopping, time_attr: training_iteration, grace_period: 2,"
                " min_samples_required: 4, hard_stop: false}"));
  CHECK(median.time_attr == "training_iteration");
  CHECK(median.grace_period == 2);
  CHECK(median.min_samples_required == 4);
  CHECK_FALSE(median.hard_stop);

  auto pbt = std::get<PbtConfig>(scheduler(
      "{type: pbt, time_attr: training_iteration, perturbation_interval: 2, burn_in_period: 1,"
      " quantile_fraction: 0.25, resample_probability: 0.5, perturbation_factors: [1.5, 0.5],"
      " hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-1]}, batch_size: [16, 32],"
      " optim: {momentum: {uniform: [0.8, 0.99]}}}}"));
  CHECK(pbt.perturbation_interval == 2);
  CHECK(pbt.burn_in_period == 1);
  CHECK(pbt.resample_probability == 0.5);
  CHECK(pbt.perturbation_factors == std::vector<double>{1.5, 0.5});
  REQUIRE(pbt.hyperparam_mutations.size() == 3);
  const auto& batch = std::get<Domain>(pbt.hyperparam_mutations[1].value);
  CHECK(batch.kind() == Domain::Kind::kChoice);  // a plain list
  CHECK(batch.values() == std::vector<json>{16, 32});
  CHECK(pbt.hyperparam_mutations[2].path == std::vector<std::string>{"optim", "momentum"});
  CHECK_FALSE(pbt.synch);
  CHECK(std::get<PbtConfig>(scheduler("{type: pbt, synch: true, hyperparam_mutations: {lr: [1]}}"))
            .synch);
}

TEST_CASE("Scaling and run sections parse every key", "[tune]") {
  TuneFile f = ParseTuneFile(Tune(R"(scaling:
  num_processes: -1
  use_gpu: true
  resources_per_worker: {CPU: 2, GPU: 1, custom: 0.5}
  placement_strategy: STRICT_SPREAD
  local_mode: true
  placement_timeout_s: 5
  collective_timeout_s: 30
run:
  storage_path: /data/runs
  failure: {max_failures: -1, max_preemptions: 4}
  checkpoint: {num_to_keep: 3, score_attribute: loss, score_order: min}
tune: {progress_interval_s: 2.5, mode: max}
)"),
                             "tune.yaml");
  const auto& s = f.trainable.scaling;
  CHECK(s.num_workers == -1);
  CHECK(s.use_gpu);
  CHECK(s.resources_per_worker ==
        std::map<std::string, double>{{"CPU", 2}, {"GPU", 1}, {"custom", 0.5}});
  CHECK(s.placement_strategy == rayd::PlacementStrategy::STRICT_SPREAD);
  CHECK(s.local_mode);
  CHECK(s.placement_timeout_s == 5);
  CHECK(s.collective_timeout_s == 30);
  CHECK(f.run.storage_path == "/data/runs");
  CHECK(f.run.failure.max_failures == -1);
  CHECK(f.run.failure.max_preemptions == 4);
  CHECK(f.run.checkpoint.num_to_keep == 3);
  CHECK(f.run.checkpoint.score_attribute == "loss");
  CHECK(f.run.checkpoint.score_order == "min");
  CHECK(f.tune.progress_interval_s == 2.5);
  CHECK(f.tune.mode == "max");
}

TEST_CASE("scaling.mesh parses, fills in data, and refuses a mesh that is not the gang", "[tune]") {
  auto mesh_of = [](const std::string& scaling) {
    return ParseTuneFile(Tune(scaling), "tune.yaml").trainable.scaling.mesh;
  };
  const rayd::train::MeshShape full =
      mesh_of("scaling: {num_workers: 8, mesh: {data: 2, pipeline: 2, tensor: 2}}\n");
  CHECK(full == rayd::train::MeshShape{.data = 2, .pipeline = 2, .tensor = 2});
  CHECK(mesh_of("scaling: {num_workers: 4, mesh: {tensor: 2}}\n") ==
        rayd::train::MeshShape{.data = 0, .pipeline = 1, .tensor = 2});
  CHECK_FALSE(mesh_of("scaling: {num_workers: 4}\n").IsSet());
  CHECK_THAT(TuneError(Tune("scaling:\n  num_workers: 8\n  mesh: {data: 2, pipeline: 2}\n")),
             Equals("tune.yaml:5: scaling.mesh: data x pipeline x tensor must equal num_workers "
                    "(8), but 2 x 2 x 1 = 4"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 6, mesh: {pipeline: 4}}\n")),
             Contains("scaling.mesh: data x pipeline x tensor must equal num_workers (6), but "
                      "pipeline x tensor = 4 does not divide it"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 2, mesh: {tensor: 0}}\n")),
             Contains("scaling.mesh.tensor: expected an integer >= 1"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 2, mesh: {model: 2}}\n")),
             Contains("scaling.mesh") && Contains("model"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: -1, use_gpu: true, mesh: {tensor: 2}}\n")),
             Contains("a mesh needs num_workers given, not -1"));
}

TEST_CASE("scaling.num_workers as a min and max pair makes an elastic run, bounds checked", "[tune]") {
  auto scaling_of = [](const std::string& scaling) {
    return ParseTuneFile(Tune(scaling), "tune.yaml").trainable.scaling;
  };
  const rayd::train::ScalingConfig elastic =
      scaling_of("scaling: {num_workers: [2, 8], resize_interval_s: 5}\n");
  CHECK(elastic.min_workers == 2);
  CHECK(elastic.num_workers == 8);
  CHECK(elastic.resize_interval_s == 5);
  CHECK(scaling_of("scaling: {num_workers: 4}\n").min_workers == 0);
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: [8, 2]}\n")),
             Contains("scaling.num_workers: [min, max]: min 8 is above max 2"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: [2]}\n")),
             Contains("scaling.num_workers: expected [min, max]"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: [0, 2]}\n")),
             Contains("scaling.num_workers[0]: expected an integer >= 1"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: [2, 4], mesh: {tensor: 2}}\n")),
             Contains("cannot have a mesh"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: [1, 2], resize_interval_s: 0}\n")),
             Contains("scaling.resize_interval_s: expected a number of seconds above 0"));

  // How --simulate models the cluster.
  const rayd::tune::TuneConfig simulated =
      ParseTuneFile(Tune("tune:\n  metric: loss\n  simulate: {workers: 16, speedup: [1, 1.9], "
                         "restart_s: 5, recorded_workers: 2}\n"),
                    "tune.yaml")
          .tune;
  CHECK(simulated.simulate.workers == 16);
  CHECK(simulated.simulate.speedup == std::vector<double>{1, 1.9});
  CHECK(simulated.simulate.restart_s == 5);
  CHECK(simulated.simulate.recorded_workers == 2);
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  simulate: {speedup: [1, 0]}\n")),
             Contains("tune.simulate.speedup[1]: expected a speedup above 0"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  simulate: {nodes: 3}\n")),
             Contains("tune.simulate") && Contains("nodes"));
}

TEST_CASE("Several objectives and constraints parse, and their mistakes name key and line",
          "[tune]") {
  TuneFile f = ParseTuneFile(Tune(R"(tune:
  metric: [val_accuracy, params]
  mode: [max, min]
  constraints: ["latency_ms <= 5", "memory_mb<2000"]
  scheduler: {type: asha, max_t: 9, grace_period: 1, reduction_factor: 3}
)"),
                             "tune.yaml");
  REQUIRE(f.tune.objectives.size() == 2);
  CHECK(f.tune.objectives[0].metric == "val_accuracy");
  CHECK(f.tune.objectives[0].maximize);
  CHECK(f.tune.objectives[1].metric == "params");
  CHECK_FALSE(f.tune.objectives[1].maximize);
  CHECK(f.tune.metric.empty());
  REQUIRE(f.tune.constraints.size() == 2);
  CHECK(f.tune.constraints[1].metric == "memory_mb");
  CHECK(f.tune.constraints[1].op == Constraint::Op::kLess);
  CHECK(f.tune.constraints[1].bound == 2000);
  // One mode for all; one metric under constraints is one objective.
  TuneFile one = ParseTuneFile(Tune("tune:\n  metric: loss\n  mode: min\n  constraints: "
                                    "[\"params <= 1e6\"]\n"),
                               "tune.yaml");
  REQUIRE(one.tune.objectives.size() == 1);
  CHECK(one.tune.objectives[0].metric == "loss");
  TuneFile all_max = ParseTuneFile(Tune("tune:\n  metric: [a, b]\n  mode: max\n"), "tune.yaml");
  CHECK(all_max.tune.objectives[1].maximize);

  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  mode: [max]\n")),
             Equals("tune.yaml:5: tune.mode: expected 2 modes, one per metric, got 1"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  constraints: [\"a =< 3\"]\n")),
             Contains("tune.yaml:5: tune.constraints[0]: "));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, a]\n")),
             Contains("tune.yaml:4: tune.metric[1]: metric 'a' is listed twice"));
  CHECK_THAT(TuneError(Tune("tune:\n  constraints: [\"a < 3\"]\n")),
             Contains("tune.metric: required with constraints"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  scheduler: {type: pasha}\n")),
             Contains("tune.yaml:5: tune.scheduler: pasha ranks by one metric"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  scheduler: {type: asha, promotion: "
                            "true}\n")),
             Contains("promotion is not available with several objectives"));
}

TEST_CASE("tune.reference_point gives one value per objective in its units, refused otherwise",
          "[tune]") {
  TuneFile f = ParseTuneFile(
      Tune("tune:\n  metric: [acc, params]\n  mode: [max, min]\n  reference_point: [0, 1e6]\n"),
      "tune.yaml");
  CHECK(f.tune.reference_point == std::vector<double>{0, 1e6});
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  reference_point: [1]\n")),
             Equals("tune.yaml:5: tune.reference_point: expected 2 values, one per metric, got 1"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  reference_point: [1, x]\n")),
             Contains("tune.yaml:5: tune.reference_point[1]: expected a number"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: a\n  reference_point: [1]\n")),
             Contains("tune.yaml:5: tune.reference_point: only with several objectives"));
}

TEST_CASE("search type tpe with several objectives or constraints loads (MOTPE)", "[tune]") {
  TuneFile two = ParseTuneFile(
      Tune("tune:\n  metric: [a, b]\n  mode: [max, min]\n  search: {type: tpe, gamma: 0.2}\n"),
      "tune.yaml");
  const auto* tpe = std::get_if<TpeConfig>(&two.tune.search);
  REQUIRE(tpe != nullptr);
  CHECK(tpe->gamma == 0.2);
  REQUIRE(two.tune.objectives.size() == 2);
  CHECK(two.tune.objectives[0].maximize);
  CHECK(two.tune.metric.empty());
  TuneFile constrained = ParseTuneFile(
      Tune("tune:\n  metric: loss\n  constraints: [\"params <= 1e6\"]\n  search: {type: tpe}\n"),
      "tune.yaml");
  CHECK(std::holds_alternative<TpeConfig>(constrained.tune.search));
  CHECK(constrained.tune.constraints.size() == 1);
}

TEST_CASE("An unknown scheduler type names its line and the choices", "[tune]") {
  std::string text = kArchitectureExample;
  text.replace(text.find("type: asha"), 10, "type: ashaa");
  // The scheduler sits on line 18 of the example.
  CHECK_THAT(TuneError(text),
             Equals("tune.yaml:18: tune.scheduler.type: unknown scheduler 'ashaa' (one of fifo, "
                    "asha, hyperband, median_stopping, pbt, pasha)"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler:\n    max_t: 3\n")),
             Contains("tune.yaml:5: tune.scheduler.type: required"));
}

TEST_CASE("Unknown keys fail at every level with a suggestion", "[tune]") {
  CHECK_THAT(TuneError(Tune("param_spaces: {}\n")),
             Contains("tune.yaml:3: param_spaces: unknown key 'param_spaces'; did you mean "
                      "'param_space'?") &&
                 Contains("allowed: name, trainable, libraries, scaling, param_space, tune, run"));
  CHECK_THAT(TuneError(Tune("scaling:\n  use_gpu: false\n  num_worker: 2\n")),
             Contains("tune.yaml:5: scaling.num_worker: unknown key") &&
                 Contains("did you mean 'num_workers'?"));
  CHECK_THAT(TuneError(Tune("tune:\n  num_sample: 2\n")),
             Contains("tune.yaml:4: tune.num_sample: unknown key"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler: {type: asha, max_t: 9, "
                            "perturbation_interval: 2}\n")),
             Contains("tune.yaml:5: tune.scheduler.perturbation_interval: unknown option for the "
                      "asha scheduler"));
  CHECK_THAT(TuneError(Tune("run:\n  failure: {max_failure: 1}\n")),
             Contains("tune.yaml:4: run.failure.max_failure: unknown key"));
  CHECK_THAT(TuneError(Tune("run:\n  checkpoint:\n    keep: 1\n")),
             Contains("tune.yaml:5: run.checkpoint.keep: unknown key"));
}

TEST_CASE("Values of the wrong type fail with the expected type", "[tune]") {
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  num_samples: eight\n")),
             Contains("tune.yaml:5: tune.num_samples: expected an integer, got 'eight'"));
  CHECK_THAT(TuneError(Tune("tune:\n  num_samples: \"8\"\n")),
             Contains("tune.yaml:4: tune.num_samples: expected an integer, got \"8\""));
  CHECK_THAT(TuneError(Tune("tune:\n  num_samples: 2.5\n")), Contains("expected an integer"));
  CHECK_THAT(TuneError(Tune("tune:\n  num_samples: 0\n")),
             Contains("tune.num_samples: expected an integer >= 1, got 0"));
  CHECK_THAT(TuneError(Tune("scaling: {use_gpu: maybe}\n")),
             Contains("tune.yaml:3: scaling.use_gpu: expected true or false, got 'maybe'"));
  CHECK_THAT(TuneError(Tune("tune:\n  stop: {loss: low}\n")),
             Contains("tune.yaml:4: tune.stop.loss: expected a number, got 'low'"));
  // A list of metrics is several objectives; a map is nothing.
  CHECK_THAT(TuneError(Tune("tune:\n  metric: {a: 1}\n")),
             Contains("tune.yaml:4: tune.metric: expected a string, got a map"));
  CHECK_THAT(TuneError(Tune("tune: 3\n")), Contains("tune.yaml:3: tune: expected a map"));
  CHECK_THAT(TuneError(Tune("libraries: libfoo.so\n")),
             Contains("tune.yaml:3: libraries: expected a list"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler: {type: asha, max_t: abc}\n")),
             Contains("tune.yaml:5: tune.scheduler.max_t: expected a number, got 'abc'"));
  CHECK_THAT(TuneError(Tune("tune:\n  seed: -1\n")),
             Contains("tune.seed: expected a non-negative integer"));
  CHECK_THAT(TuneError(Tune("scaling: {placement_strategy: CLUSTERED}\n")),
             Contains("scaling.placement_strategy: expected one of PACK, SPREAD, STRICT_PACK, "
                      "STRICT_SPREAD, got 'CLUSTERED'"));
  CHECK_THAT(TuneError(Tune("run:\n  checkpoint: {score_order: best}\n")),
             Contains("run.checkpoint.score_order: expected one of min, max"));
  CHECK_THAT(TuneError(Tune("scaling:\n  resources_per_worker: {CPU: -1}\n")),
             Contains("tune.yaml:4: scaling.resources_per_worker.CPU: must not be negative"));
}

TEST_CASE("Bad domains fail with the parameter's path and line", "[tune]") {
  CHECK_THAT(TuneError(Tune("param_space:\n  hidden: {grid_search: []}\n")),
             Contains("tune.yaml:4: param_space.hidden: grid_search: needs at least one value"));
  CHECK_THAT(TuneError(Tune("param_space:\n  b:\n    choice: []\n")),
             Contains("tune.yaml:5: param_space.b: choice: needs at least one value"));
  CHECK_THAT(TuneError(Tune("param_space:\n  lr: {loguniform: [0.1, 1.0e-4]}\n")),
             Contains("tune.yaml:4: param_space.lr: loguniform: lower bound 0.1 must be below "
                      "upper bound 0.0001"));
  CHECK_THAT(TuneError(Tune("param_space:\n  lr: {loguniform: [0, 1]}\n")),
             Contains("param_space.lr: loguniform: bounds must be positive"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {quniform: [0, 1, 0]}\n")),
             Contains("param_space.x: quniform: q must be positive"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {randn: [0, -1]}\n")),
             Contains("param_space.x: randn: sd must be positive"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {uniform: [0, .inf]}\n")),
             Contains("param_space.x: uniform: bounds must be finite"));
  CHECK_THAT(TuneError(Tune("param_space:\n  model:\n    x: {uniform: [0, 1, 2]}\n")),
             Contains("tune.yaml:5: param_space.model.x: uniform takes [lower, upper], got 3"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {randint: [0, 2.5]}\n")),
             Contains("param_space.x[1]: expected an integer, got '2.5'"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {randn: 3}\n")),
             Contains("param_space.x: randn takes [mean, sd] or [], got '3'"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {qrandint: [1]}\n")),
             Contains("qrandint takes [lower, upper, q] or [lower, upper], got 1 values"));
  CHECK(TuneError(Tune("param_space:\n  x: {qrandint: [1, 5]}\n")).empty());
  CHECK(TuneError(Tune("param_space:\n  x: {randn: [2]}\n")).empty());
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {choice: sgd}\n")),
             Contains("param_space.x: choice: expected a list of values"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x:\n    uniform: [0, 1]\n    q: 2\n")),
             Contains("tune.yaml:5: param_space.x: a domain map has exactly one key: 'uniform' "
                      "beside 'q'"));
  CHECK_THAT(TuneError(Tune("param_space:\n  x: {a: 1, a: 2}\n")),
             Contains("tune.yaml:4: param_space.x.a: duplicate key"));
}

TEST_CASE("Missing required keys and scheduler requirements fail", "[tune]") {
  CHECK_THAT(TuneError("trainable: loop\nscaling: {num_workers: 1}\n"),
             Contains("tune.yaml:1: name: required"));
  CHECK_THAT(TuneError("name: x\n"), Contains("tune.yaml:1: trainable: required"));
  CHECK_THAT(TuneError("name: \"\"\ntrainable: loop\n"), Contains("name: must not be empty"));
  CHECK_THAT(TuneError(Tune("tune:\n  mode: min\n  scheduler: {type: asha}\n")),
             Contains("tune.yaml:5: tune.metric: required by the asha scheduler"));
  CHECK(TuneError(Tune("tune:\n  scheduler: {type: fifo}\n")).empty());
  CHECK_THAT(TuneError(Tune("tune:\n  mode: median\n")),
             Contains("tune.yaml:4: tune.mode: expected one of min, max, got 'median'"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler: {type: pbt}\n")),
             Contains("tune.yaml:5: tune.scheduler.hyperparam_mutations: required"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler:\n    type: pbt\n"
                            "    hyperparam_mutations: {lr: 0.1}\n")),
             Contains("tune.yaml:7: tune.scheduler.hyperparam_mutations.lr: expected a domain "
                      "or a list of values"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler:\n    type: pbt\n"
                            "    hyperparam_mutations: {lr: [0.1]}\n"
                            "    quantile_fraction: 0.75\n")),
             Contains("tune.yaml:8: tune.scheduler.quantile_fraction: must be in (0, 0.5]"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler:\n    type: pbt\n"
                            "    hyperparam_mutations: {lr: [0.1]}\n"
                            "    synch: sometimes\n")),
             Contains("tune.yaml:8: tune.scheduler.synch: expected true or false"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler: {type: asha, max_t: 5, "
                            "grace_period: 10}\n")),
             Contains("tune.scheduler.grace_period: grace_period 10 exceeds max_t 5"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  scheduler: {type: hyperband, "
                            "reduction_factor: 1}\n")),
             Contains("tune.scheduler.reduction_factor: must be greater than 1"));
}

TEST_CASE("ranks of one group never share a GPU, single-worker trials may", "[tune]") {
  CHECK_THAT(TuneError(Tune("scaling:\n  num_workers: 2\n  use_gpu: true\n"
                            "  resources_per_worker: {CPU: 1, GPU: 0.5}\n")),
             Contains("tune.yaml:6: scaling.resources_per_worker.GPU: 0.5 would put ranks of "
                      "one group on the same GPU, which NCCL refuses"));
  // Above 1, whole amounts only (Ray's rule, rayd/api/task_options.h), for every resource.
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: -1, use_gpu: true, "
                            "resources_per_worker: {GPU: 1.5}}\n")),
             Contains("scaling.resources_per_worker.GPU: resource \"GPU\" = 1.5: an "
                      "amount above 1 must be a whole number"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 2, resources_per_worker: {CPU: 2.5}}\n")),
             Contains("scaling.resources_per_worker.CPU") && Contains("whole number"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 2, resources_per_worker: {slot: 0}}\n")),
             Contains("scaling.resources_per_worker.slot") && Contains("asks for nothing"));
  // Four trials of one rank each on one GPU; whole GPUs for a gang; no GPU training at all.
  CHECK(TuneError(Tune("scaling: {num_workers: 1, use_gpu: true, "
                       "resources_per_worker: {GPU: 0.25}}\n")).empty());
  CHECK(TuneError(Tune("scaling: {num_workers: 2, use_gpu: true, "
                       "resources_per_worker: {GPU: 2}}\n")).empty());
  CHECK(TuneError(Tune("scaling: {num_workers: 2, resources_per_worker: {GPU: 0.5}}\n")).empty());
}

TEST_CASE("num_workers -1 needs use_gpu and the alias is exclusive", "[tune]") {
  CHECK_THAT(TuneError(Tune("scaling:\n  num_processes: -1\n")),
             Contains("tune.yaml:4: scaling.num_processes: -1 (one worker per GPU) needs "
                      "use_gpu: true"));
  CHECK(TuneError(Tune("scaling: {num_workers: -1, use_gpu: true}\n")).empty());
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: 0}\n")),
             Contains("scaling.num_workers: expected at least 1 worker"));
  CHECK_THAT(TuneError(Tune("scaling: {num_workers: -2}\n")),
             Contains("expected an integer >= -1"));
  CHECK_THAT(TuneError(Tune("scaling:\n  num_workers: 2\n  num_processes: 2\n")),
             Contains("tune.yaml:5: scaling.num_processes: an alias of num_workers"));
  CHECK(ParseTuneFile(Tune("scaling: {num_processes: 3}\n"), "t.yaml")
            .trainable.scaling.num_workers == 3);
}

TEST_CASE("YAML syntax errors and unreadable files become ConfigFileError", "[tune]") {
  CHECK_THAT(TuneError("name: x\ntrainable: y\ntune: {metric: [a, b\nrun: {}\n"),
             Contains("tune.yaml:") && Contains("YAML syntax error"));
  CHECK_THAT(TuneError("name: x\ntrainable: y\n  bad: indent\n"),
             Contains("tune.yaml:3: YAML syntax error"));
  CHECK_THAT(TuneError(""), Contains("tune.yaml:1: the file is empty"));
  CHECK_THAT(TuneError("- a\n- b\n"), Contains("tune.yaml:1: expected a map, got a list"));
  TempDir dir;
  CHECK_THROWS_AS(LoadTuneFile(dir.path() + "/missing.yaml"), ConfigFileError);
  CHECK_THROWS_WITH(LoadTrainFile(dir.path() + "/missing.yaml"), Contains("missing.yaml"));
}

TEST_CASE("train.yaml loads the header's example", "[tune]") {
  TempDir dir;
  const std::string path = dir.path() + "/train.yaml";
  WriteFile(path, R"(name: mlp
train_loop: mlp_classifier
libraries: [path/libfoo.so]
config: {lr: 0.01, hidden: 128, layers: [64, 32], opt: {name: adam}, flag: true}
scaling: {num_workers: 2, use_gpu: false, resources_per_worker: {CPU: 1},
          placement_strategy: PACK, local_mode: false}
run: {storage_path: ./rayd_results, failure: {max_failures: 1},
      checkpoint: {num_to_keep: 2, score_attribute: loss, score_order: min}}
)");
  TrainFile f = LoadTrainFile(path);
  CHECK(f.path == path);
  CHECK(f.train_loop == "mlp_classifier");
  CHECK(f.libraries == std::vector<std::string>{dir.path() + "/path/libfoo.so"});
  CHECK(f.config == json::parse(R"({"lr": 0.01, "hidden": 128, "layers": [64, 32],
                                    "opt": {"name": "adam"}, "flag": true})"));
  CHECK(f.config["hidden"].is_number_integer());
  CHECK(f.scaling.num_workers == 2);
  CHECK(f.scaling.resources_per_worker == std::map<std::string, double>{{"CPU", 1}});
  CHECK_FALSE(f.scaling.local_mode);
  CHECK(f.run.name == "mlp");
  CHECK(f.run.storage_path == "./rayd_results");
  CHECK(f.run.failure.max_failures == 1);
  CHECK(f.run.checkpoint.num_to_keep == 2);
  CHECK(f.run.checkpoint.score_attribute == "loss");
  CHECK(f.run.checkpoint.score_order == "min");

  TrainFile minimal = ParseTrainFile("name: m\ntrain_loop: l\n", "train.yaml");
  CHECK(minimal.config == json::object());
  CHECK(minimal.scaling.num_workers == 1);
}

TEST_CASE("train.yaml errors name the key and line", "[tune]") {
  CHECK_THAT(TrainError("name: m\ntrain_loop: l\ntrainer: x\n"),
             Contains("train.yaml:3: trainer: unknown key 'trainer'") &&
                 Contains("allowed: name, train_loop, trainable, libraries, config, scaling, run"));
  CHECK_THAT(TrainError("name: m\ntrain_loop: l\ntrainable: x\n"),
             Contains("train.yaml:3: trainable: give train_loop or trainable, not both"));
  CHECK_THAT(TrainError("name: m\n"), Contains("train.yaml:1: train_loop: required"));
  CHECK_THAT(TrainError("name: m\ntrain_loop: l\nconfig: [1, 2]\n"),
             Contains("train.yaml:3: config: expected a map, got a list"));
  CHECK_THAT(TrainError("name: m\ntrain_loop: l\nconfig:\n  a: 1\n  a: 2\n"),
             Contains("train.yaml:5: config.a: duplicate key"));
  CHECK_THAT(TrainError("name: m\ntrain_loop: l\nscaling:\n  num_workers: two\n"),
             Contains("train.yaml:4: scaling.num_workers: expected an integer, got 'two'"));
}

TEST_CASE("A command trainable parses, its paths against the file's directory", "[tune]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/job");
  const std::string path = dir.path() + "/tune.yaml";
  TuneFile f = ParseTuneFile(R"(name: py
trainable:
  command: [python3, train.py, --data, /data]
  launcher: deepspeed
  working_dir: job
  env: {OMP_NUM_THREADS: 2, NCCL_DEBUG: INFO}
  report_timeout_s: 600
  stop_grace_s: 10
)",
                             path);
  REQUIRE(f.trainable.command.has_value());
  const rayd::train::Command& c = *f.trainable.command;
  CHECK(c.argv == std::vector<std::string>{"python3", "train.py", "--data", "/data"});
  CHECK(c.launcher == "deepspeed");
  CHECK(c.working_dir == dir.path() + "/job");
  CHECK(c.env == std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"},
                                                    {"OMP_NUM_THREADS", "2"}});
  CHECK(c.report_timeout_s == 600);
  CHECK(c.stop_grace_s == 10);

  // Defaults: torch's environment, run in the file's directory; one string is the program.
  TuneFile plain = ParseTuneFile("name: p\ntrainable: {command: ./train.sh}\n", path);
  REQUIRE(plain.trainable.command.has_value());
  CHECK(plain.trainable.command->argv == std::vector<std::string>{"./train.sh"});
  CHECK(plain.trainable.command->launcher == "torch");
  CHECK(plain.trainable.command->working_dir == dir.path());

  TrainFile train =
      ParseTrainFile("name: t\ntrainable: {command: [python3, x.py], launcher: none}\n", path);
  REQUIRE(train.command.has_value());
  CHECK(train.command->launcher == "none");
}

TEST_CASE("command trainable errors name the key and line", "[tune]") {
  CHECK_THAT(TuneError("name: t\ntrainable:\n  launcher: torch\n"),
             Contains("tune.yaml:2: trainable.command: required"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: []\n"),
             Contains("tune.yaml:3: trainable.command: expected the program and its arguments"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: [x]\n  launcher: mpirun\n"),
             Contains("tune.yaml:4: trainable.launcher: expected one of torch, deepspeed, "
                      "tensorflow, jax, horovod, none, got 'mpirun'"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: [x]\n  working_dir: /no/such/dir\n"),
             Contains("tune.yaml:4: trainable.working_dir: no directory /no/such/dir"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: [x]\n  env: {A: [1]}\n"),
             Contains("tune.yaml:4: trainable.env.A: expected a string"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: [x]\n  report_timeout_s: -1\n"),
             Contains("tune.yaml:4: trainable.report_timeout_s: expected an integer >= 0"));
  CHECK_THAT(TuneError("name: t\ntrainable:\n  command: [x]\n  shell: true\n"),
             Contains("tune.yaml:4: trainable.shell: unknown key 'shell'"));
}

}  // namespace
}  // namespace rayd::tune

namespace rayd::tune {
namespace {

TEST_CASE("tune.search picks random, grid or tpe with its options", "[tune]") {
  TuneFile random = ParseTuneFile(Tune("tune: {search: {type: random}}\n"), "tune.yaml");
  CHECK(std::holds_alternative<RandomSearchConfig>(random.tune.search));
  TuneFile tpe = ParseTuneFile(Tune("param_space: {lr: {loguniform: [1.0e-4, 0.1]}}\n"
                                    "tune:\n  metric: loss\n  search: {type: tpe, n_startup_trials: 4,"
                                    " n_ei_candidates: 12, gamma: 0.2, multivariate: true}\n"),
                               "tune.yaml");
  const auto* config = std::get_if<TpeConfig>(&tpe.tune.search);
  REQUIRE(config != nullptr);
  CHECK(config->n_startup_trials == 4);
  CHECK(config->n_ei_candidates == 12);
  CHECK(config->gamma == 0.2);
  CHECK(config->multivariate);
}

TEST_CASE("tune.search errors name the key and line", "[tune]") {
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  search: {type: bayes}\n")),
             Contains("tune.yaml:5: tune.search.type: expected one of random, grid, tpe, nsga2, "
                      "got 'bayes'"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  search: {type: tpe, n_candidates: 3}\n")),
             Contains("tune.yaml:5: tune.search.n_candidates: unknown key 'n_candidates'"));
  CHECK_THAT(TuneError(Tune("tune:\n  search: {type: tpe}\n")),
             Contains("tune.metric: required by the tpe searcher"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: m\n  search: {type: tpe, gamma: 2}\n")),
             Contains("tune.search.gamma: expected a share in (0, 1], got 2"));
  CHECK_THAT(TuneError(Tune("param_space:\n  hidden: {grid_search: [64, 128]}\n"
                            "tune:\n  metric: m\n  search: {type: tpe}\n")),
             Contains("tune.yaml:7: tune.search: tpe cannot model param_space.hidden "
                      "(grid_search; use choice)"));
}

}  // namespace
}  // namespace rayd::tune

namespace rayd::tune {
namespace {

TEST_CASE("tune.search type nsga2 takes its options, with several objectives or constraints",
          "[tune]") {
  TuneFile f = ParseTuneFile(Tune("param_space: {lr: {loguniform: [1.0e-4, 0.1]}}\n"
                                  "tune:\n  metric: [loss, params]\n  search: {type: nsga2, "
                                  "population_size: 8, mutation_prob: 0.3, crossover_prob: 1, "
                                  "swapping_prob: 0}\n"),
                             "tune.yaml");
  const auto* config = std::get_if<Nsga2Config>(&f.tune.search);
  REQUIRE(config != nullptr);
  CHECK(config->population_size == 8);
  CHECK(config->mutation_prob == 0.3);
  CHECK(config->crossover_prob == 1);
  CHECK(config->swapping_prob == 0);
  // The defaults (mutation_prob null: 1 / parameters, resolved by the searcher); one metric under
  // constraints is enough.
  TuneFile defaults = ParseTuneFile(Tune("tune:\n  metric: loss\n  constraints: [\"p < 3\"]\n"
                                         "  search: {type: nsga2, mutation_prob: null}\n"),
                                    "tune.yaml");
  const Nsga2Config& d = std::get<Nsga2Config>(defaults.tune.search);
  CHECK(d.population_size == 50);
  CHECK_FALSE(d.mutation_prob.has_value());
  CHECK(d.crossover_prob == 0.9);
  CHECK(d.swapping_prob == 0.5);
}

TEST_CASE("tune.search type nsga2 errors name the key and line", "[tune]") {
  const std::string two = "tune:\n  metric: [a, b]\n  search:\n    type: nsga2\n";
  CHECK_THAT(TuneError(Tune(two + "    population_size: 1\n")),
             Contains("tune.yaml:7: tune.search.population_size: expected an integer >= 2, got 1"));
  CHECK_THAT(TuneError(Tune(two + "    mutation_prob: 0\n")),
             Contains("tune.yaml:7: tune.search.mutation_prob: expected a probability in (0, 1], "
                      "got 0"));
  CHECK_THAT(TuneError(Tune(two + "    crossover_prob: 1.5\n")),
             Contains("tune.yaml:7: tune.search.crossover_prob: expected a probability in [0, 1], "
                      "got 1.5"));
  CHECK_THAT(TuneError(Tune(two + "    swapping_prob: -0.5\n")),
             Contains("tune.yaml:7: tune.search.swapping_prob: expected a probability in [0, 1]"));
  CHECK_THAT(TuneError(Tune(two + "    swapping_prob: yes\n")),
             Contains("tune.yaml:7: tune.search.swapping_prob: expected a number"));
  CHECK_THAT(TuneError(Tune(two + "    gamma: 0.2\n")),
             Contains("tune.yaml:7: tune.search.gamma: unknown key 'gamma'"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  search: {type: nsga2}\n")),
             Contains("tune.yaml:5: tune.search: the nsga2 searcher ranks by several objectives"));
  CHECK_THAT(TuneError(Tune("param_space:\n  hidden: {grid_search: [64, 128]}\n"
                            "tune:\n  metric: [a, b]\n  search: {type: nsga2}\n")),
             Contains("tune.yaml:7: tune.search: nsga2 cannot draw param_space.hidden "
                      "(grid_search; use choice)"));
  // randn has no bounds, which TPE needs and NSGA-II (it only draws) does not.
  CHECK_NOTHROW(ParseTuneFile(Tune("param_space:\n  w: {randn: [0, 1]}\n" + two), "tune.yaml"));
}

TEST_CASE("scheduler type pasha takes ASHA's options and epsilon", "[tune]") {
  TuneFile f = ParseTuneFile(Tune("tune:\n  metric: loss\n  scheduler: {type: pasha, max_t: 27, "
                                  "grace_period: 1, epsilon: 0.01}\n"),
                             "tune.yaml");
  const auto* pasha = std::get_if<PashaConfig>(&f.tune.scheduler);
  REQUIRE(pasha != nullptr);
  CHECK(pasha->max_t == 27);
  CHECK(pasha->reduction_factor == 3);
  CHECK(pasha->epsilon == 0.01);
  TuneFile estimated = ParseTuneFile(
      Tune("tune:\n  metric: loss\n  scheduler: {type: pasha, epsilon: auto}\n"), "t.yaml");
  CHECK_FALSE(std::get<PashaConfig>(estimated.tune.scheduler).epsilon.has_value());
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  scheduler: {type: pasha, brackets: 2}\n")),
             Contains("tune.scheduler.brackets: unknown option for the pasha scheduler"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  scheduler: {type: pasha, epsilon: -1}\n")),
             Contains("tune.scheduler.epsilon: must not be negative"));
}

TEST_CASE("datasets: parse in tune.yaml and train.yaml, paths against the file's directory",
          "[tune][data]") {
  TuneFile f = ParseTuneFile(Tune(R"(datasets:
  train:
    format: idx
    paths: [data/train-*.gz, /abs/x.gz]
    rows: [0, 100]
    transforms: [{limit: 10}]
  validation: {format: npy, paths: val.npy, shuffle: false}
  named: {format: idx, columns: {image: img.idx, label: /l.idx}}
)"),
                             "/etc/rayd/sweeps/tune.yaml");
  REQUIRE(f.run.datasets.size() == 3);
  const rayd::data::DatasetSpec& train = f.run.datasets[0];
  CHECK(train.name == "train");
  CHECK(train.format == "idx");
  CHECK(train.paths == std::vector<std::string>{"/etc/rayd/sweeps/data/train-*.gz", "/abs/x.gz"});
  CHECK(train.options["rows"] == nlohmann::json::array({0, 100}));
  CHECK(train.options["transforms"][0]["limit"] == 10);
  CHECK(f.run.datasets[1].paths == std::vector<std::string>{"/etc/rayd/sweeps/val.npy"});
  CHECK(f.run.datasets[1].options["shuffle"] == false);
  CHECK(f.run.datasets[2].options["columns"]["image"] == "/etc/rayd/sweeps/img.idx");
  CHECK(f.run.datasets[2].options["columns"]["label"] == "/l.idx");
  TrainFile t = ParseTrainFile("name: m\ntrain_loop: l\ndatasets: {d: {format: csv, paths: [a.csv]}}\n",
                               "/srv/train.yaml");
  REQUIRE(t.run.datasets.size() == 1);
  CHECK(t.run.datasets[0].paths == std::vector<std::string>{"/srv/a.csv"});

  CHECK(TuneError(Tune("datasets:\n  train: {paths: [a]}\n")) ==
        "tune.yaml:4: datasets.train.format: required");
  CHECK(TuneError(Tune("datasets:\n  train:\n    format: idx\n    on_error: maybe\n    paths: [a]\n")) ==
        "tune.yaml:6: datasets.train.on_error: expected raise or skip");
  CHECK(TuneError(Tune("datasets:\n  train:\n    format: idx\n")) ==
        "tune.yaml:4: datasets.train.paths: required (a list of globs)");
  CHECK(TuneError(Tune("datasets: [a, b]\n")).rfind("tune.yaml:3: datasets: expected a map", 0) == 0);
}

TEST_CASE("Schedulers rank by several objectives, median stopping on its scalarization",
          "[tune][multi_objective]") {
  TuneFile f = ParseTuneFile(Tune(R"(tune:
  metric: [val_accuracy, params]
  mode: [max, min]
  constraints: ["latency_ms <= 5"]
  scheduler:
    type: median_stopping
    grace_period: 2
    scalarization: {weights: {val_accuracy: 1.0, params: 1.0e-6}}
)"),
                             "tune.yaml");
  const auto& median = std::get<MedianStoppingConfig>(f.tune.scheduler);
  CHECK(median.grace_period == 2);
  REQUIRE(median.scalarization);
  CHECK(median.scalarization->kind == Scalarization::Kind::kWeightedSum);
  CHECK(median.scalarization->weights ==
        std::map<std::string, double>{{"params", 1e-6}, {"val_accuracy", 1.0}});
  CHECK(median.scalarization->reference.empty());

  TuneFile chebyshev = ParseTuneFile(
      Tune("tune:\n  metric: [a, b]\n  mode: [max, min]\n  scheduler: {type: median_stopping, "
           "scalarization: {type: chebyshev, weights: {a: 1, b: 0.5}, reference: {a: 1, b: 0}}}\n"),
      "tune.yaml");
  const auto& cheb = *std::get<MedianStoppingConfig>(chebyshev.tune.scheduler).scalarization;
  CHECK(cheb.kind == Scalarization::Kind::kChebyshev);
  CHECK(cheb.weights == std::map<std::string, double>{{"a", 1}, {"b", 0.5}});
  CHECK(cheb.reference == std::map<std::string, double>{{"a", 1}, {"b", 0}});

  // HyperBand and PBT take several objectives with their usual options.
  CHECK(std::holds_alternative<HyperBandConfig>(
      ParseTuneFile(Tune("tune:\n  metric: [a, b]\n  scheduler: hyperband\n"), "tune.yaml")
          .tune.scheduler));
  CHECK(std::holds_alternative<PbtConfig>(
      ParseTuneFile(Tune("tune:\n  metric: [a, b]\n  constraints: [\"c < 1\"]\n  scheduler: "
                         "{type: pbt, hyperparam_mutations: {lr: [0.1, 0.2]}}\n"),
                    "tune.yaml")
          .tune.scheduler));
}

TEST_CASE("A missing or malformed scalarization names its key and line",
          "[tune][multi_objective]") {
  // The scalarization sits on line 7.
  auto error = [](const std::string& scalarization) {
    return TuneError(
        Tune("tune:\n  metric: [a, b]\n  scheduler:\n    type: median_stopping\n"
             "    scalarization: " +
             scalarization + "\n"));
  };
  CHECK_THAT(TuneError(Tune("tune:\n  metric: [a, b]\n  scheduler: {type: median_stopping}\n")),
             Equals("tune.yaml:5: tune.scheduler.scalarization: required with several objectives "
                    "or constraints, e.g. {weights: {a: 1}}"));
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  constraints: [\"x < 1\"]\n"
                            "  scheduler: median_stopping\n")),
             Contains("tune.yaml:6: tune.scheduler.scalarization: required"));
  CHECK_THAT(error("{weights: {a: 1, c: 2}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.weights.c: 'c' is not an "
                    "objective (the objectives: a, b)"));
  CHECK_THAT(error("{weights: {a: -1}}"),
             Contains("tune.yaml:7: tune.scheduler.scalarization.weights.a: must not be negative"));
  CHECK_THAT(error("{weights: {a: fast}}"),
             Contains("tune.yaml:7: tune.scheduler.scalarization.weights.a: expected a number"));
  CHECK_THAT(error("{weights: {a: 0, b: 0}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.weights: expected at least one "
                    "weight above 0"));
  CHECK_THAT(error("{weights: {}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.weights: expected at least one "
                    "objective's weight"));
  CHECK_THAT(error("{type: chebyshev}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.weights: required"));
  CHECK_THAT(error("{type: tchebycheff, weights: {a: 1}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.type: expected one of "
                    "weighted_sum, chebyshev, got 'tchebycheff'"));
  CHECK_THAT(error("{type: chebyshev, weights: {a: 1, b: 1}, reference: {a: 1}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.reference.b: required: chebyshev "
                    "needs the ideal value of every objective weighted above 0"));
  CHECK_THAT(error("{weights: {a: 1}, reference: {a: 1}}"),
             Equals("tune.yaml:7: tune.scheduler.scalarization.reference: only for type: "
                    "chebyshev"));
  CHECK_THAT(error("{weight: {a: 1}}"),
             Contains("tune.yaml:7: tune.scheduler.scalarization.weight: unknown scalarization "
                      "key 'weight'; did you mean 'weights'?"));
  CHECK_THAT(error("weighted_sum"),
             Contains("tune.yaml:7: tune.scheduler.scalarization: expected a map"));
  // In block style each weight has its own line.
  CHECK_THAT(error("\n      type: chebyshev\n      weights:\n        a: 1\n        b: -2\n"),
             Contains("tune.yaml:11: tune.scheduler.scalarization.weights.b: must not be "
                      "negative"));
  // With one metric a scalarization is refused rather than ignored.
  CHECK_THAT(TuneError(Tune("tune:\n  metric: loss\n  scheduler: {type: median_stopping, "
                            "scalarization: {weights: {loss: 1}}}\n")),
             Contains("tune.yaml:5: tune.scheduler.scalarization: only with several objectives"));
}

}  // namespace
}  // namespace rayd::tune
