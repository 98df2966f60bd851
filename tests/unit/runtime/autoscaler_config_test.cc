// The autoscaler's config file (autoscaler/config.h): defaults, every key, and errors that name
// the file, the line and the key path.

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "autoscaler/config.h"
#include "test_util.h"

namespace rayd::autoscaler {
namespace {

using scheduler::FixedPoint;

AutoscalerConfig Parse(const std::string& text) {
  Result<AutoscalerConfig> r = ParseAutoscalerConfig(text, "autoscaler.yaml");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// The error's message; fails the test when parsing succeeds or the code is not InvalidArgument.
std::string Error(const std::string& text) {
  Result<AutoscalerConfig> r = ParseAutoscalerConfig(text, "autoscaler.yaml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  return r.status().message();
}

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

const char* const kMinimal = R"(provider: {type: local}
max_nodes: 4
node_types:
  cpu2:
    resources: {CPU: 2}
)";

TEST_CASE("the minimal file parses with the defaults", "[autoscaler_config]") {
  AutoscalerConfig c = Parse(kMinimal);
  CHECK(c.provider_type == "local");
  CHECK(c.provider == nlohmann::json::object());
  CHECK(c.max_nodes == 4);
  CHECK(c.idle_timeout_s == 60);
  CHECK(c.upscaling_speed == 1.0);
  CHECK(c.update_interval_s == 5);
  CHECK(c.launch_timeout_s == 300);
  REQUIRE(c.node_types.size() == 1);
  const NodeTypeConfig& t = c.node_types[0];
  CHECK(t.name == "cpu2");
  CHECK(t.resources == scheduler::ResourceSet{{"CPU", 2}});
  CHECK(t.labels.empty());
  CHECK(t.min_nodes == 0);
  CHECK(t.max_nodes == 4);  // the cluster's
  CHECK(t.cost == 1.0);
  CHECK(t.provider == nlohmann::json::object());
}

TEST_CASE("a file with every key keeps every value", "[autoscaler_config]") {
  AutoscalerConfig c = Parse(R"(
provider:
  type: slurm
  partition: batch
  time_limit: "04:00:00"
  sbatch_args: [--account=ml, --nodes, 1]
  rayd_binary: /opt/rayd/bin/rayd
  drain_before_limit_s: 300
max_nodes: 10
idle_timeout_s: 30.5
upscaling_speed: 2
update_interval_s: 1
launch_timeout_s: 600
node_types:
  gpu:
    resources: {CPU: 8, GPU: 0.5, memory: 4GiB, accel_v1: 1}
    labels: {zone: a, gen: 3}
    min_nodes: 1
    max_nodes: 6
    cost: 4.5
    provider: {partition: gpu, sbatch_args: [--gres=gpu:1]}
)");
  CHECK(c.provider_type == "slurm");
  CHECK(c.provider ==
        nlohmann::json{{"partition", "batch"},
                       {"time_limit", "04:00:00"},
                       {"sbatch_args", {"--account=ml", "--nodes", "1"}},  // args stay strings
                       {"rayd_binary", "/opt/rayd/bin/rayd"},
                       {"drain_before_limit_s", 300}});
  CHECK(c.provider["drain_before_limit_s"].is_number_integer());
  CHECK(c.max_nodes == 10);
  CHECK(c.idle_timeout_s == 30.5);
  CHECK(c.upscaling_speed == 2);
  CHECK(c.update_interval_s == 1);
  CHECK(c.launch_timeout_s == 600);
  const NodeTypeConfig* gpu = c.FindType("gpu");
  REQUIRE(gpu != nullptr);
  CHECK(gpu->resources.Get("CPU") == FixedPoint::FromWhole(8));
  CHECK(gpu->resources.Get("GPU") == FixedPoint::FromDouble(0.5));
  CHECK(gpu->resources.Get("memory") == FixedPoint::FromWhole(4LL << 30));
  CHECK(gpu->resources.Get("accel_v1") == FixedPoint::FromWhole(1));
  CHECK(gpu->labels == scheduler::Labels{{"zone", "a"}, {"gen", "3"}});
  CHECK(gpu->min_nodes == 1);
  CHECK(gpu->max_nodes == 6);
  CHECK(gpu->cost == 4.5);
  CHECK(gpu->provider == nlohmann::json{{"partition", "gpu"}, {"sbatch_args", {"--gres=gpu:1"}}});
  CHECK(c.FindType("cpu") == nullptr);
}

TEST_CASE("node types keep the file's order and FindType finds each", "[autoscaler_config]") {
  AutoscalerConfig c = Parse(R"(provider: {type: local}
max_nodes: 8
node_types:
  zeta: {resources: {CPU: 1}}
  alpha: {resources: {CPU: 2}}
  mid: {resources: {CPU: 4}}
)");
  REQUIRE(c.node_types.size() == 3);
  CHECK(c.node_types[0].name == "zeta");
  CHECK(c.node_types[1].name == "alpha");
  CHECK(c.node_types[2].name == "mid");
  CHECK(c.FindType("alpha") == &c.node_types[1]);
}

TEST_CASE("memory resources take byte strings, others numbers", "[autoscaler_config]") {
  AutoscalerConfig c = Parse(R"(provider: {type: local, object_store_memory: 512MiB}
max_nodes: 2
node_types:
  big:
    resources: {CPU: 0.25, memory: "1.5 GiB", object_store_memory: 2GB}
)");
  const NodeTypeConfig& t = c.node_types[0];
  CHECK(t.resources.Get("CPU") == FixedPoint::FromDouble(0.25));
  CHECK(t.resources.Get("memory") == FixedPoint::FromWhole(3LL << 29));
  CHECK(t.resources.Get("object_store_memory") == FixedPoint::FromWhole(2'000'000'000));
  CHECK(c.provider == nlohmann::json{{"object_store_memory", "512MiB"}});

  CHECK_THAT(Error(R"(provider: {type: local}
max_nodes: 2
node_types:
  big:
    resources: {CPU: 4GiB}
)"),
             StartsWith("autoscaler.yaml:5: node_types.big.resources.CPU: expected a non-negative "
                        "number, got \"4GiB\""));
  CHECK_THAT(Error(R"(provider: {type: local}
max_nodes: 2
node_types:
  big:
    resources: {memory: 4 lightyears}
)"),
             StartsWith("autoscaler.yaml:5: node_types.big.resources.memory: "));
}

TEST_CASE("max_nodes defaults: a type's from the cluster, the cluster's from the types",
          "[autoscaler_config]") {
  AutoscalerConfig c = Parse(R"(provider: {type: local}
node_types:
  a: {resources: {CPU: 1}, max_nodes: 3}
  b: {resources: {CPU: 2}, max_nodes: 2, min_nodes: 1}
)");
  CHECK(c.max_nodes == 5);
  CHECK(c.node_types[0].max_nodes == 3);
  CHECK(c.node_types[1].max_nodes == 2);

  CHECK(Error(R"(provider: {type: local}
node_types:
  a: {resources: {CPU: 1}, max_nodes: 3}
  b:
    resources: {CPU: 2}
)") == "autoscaler.yaml:4: node_types.b.max_nodes: required (the cluster's or every node type's)");
  CHECK_THAT(Error(R"(provider: {type: local}
node_types:
  a: {resources: {CPU: 1}}
)"),
             Contains("max_nodes: required (the cluster's or every node type's)"));
}

TEST_CASE("node counts are checked against each other", "[autoscaler_config]") {
  SECTION("a type's min_nodes above its max_nodes") {
    CHECK(Error(R"(provider: {type: local}
max_nodes: 10
node_types:
  cpu2:
    resources: {CPU: 2}
    max_nodes: 2
    min_nodes: 3
)") == "autoscaler.yaml:7: node_types.cpu2.min_nodes: 3 is above max_nodes 2");
  }
  SECTION("a type's min_nodes above the cluster's max_nodes it defaults to") {
    CHECK_THAT(Error(R"(provider: {type: local}
max_nodes: 2
node_types:
  cpu2: {resources: {CPU: 2}, min_nodes: 3}
)"),
               StartsWith("autoscaler.yaml:4: node_types.cpu2.min_nodes: 3 is above max_nodes 2"));
  }
  SECTION("a type's max_nodes above the cluster's") {
    CHECK(Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  cpu2:
    resources: {CPU: 2}
    max_nodes: 5
)") == "autoscaler.yaml:6: node_types.cpu2.max_nodes: 5 is above the cluster's max_nodes 4");
  }
  SECTION("the types' min_nodes summing above the cluster's max_nodes") {
    CHECK(Error(R"(provider: {type: local}
max_nodes: 3
node_types:
  a: {resources: {CPU: 1}, min_nodes: 2}
  b: {resources: {CPU: 1}, min_nodes: 2}
)") == "autoscaler.yaml:2: max_nodes: 3 is below the node types' min_nodes, which sum to 4");
  }
}

TEST_CASE("a bad scalar names its line, key path and value", "[autoscaler_config]") {
  CHECK(Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  cpu2:
    resources: {CPU: 2}
    labels: {zone: a}
    min_nodes: x
)") == "autoscaler.yaml:7: node_types.cpu2.min_nodes: expected a non-negative integer, got \"x\"");
  CHECK_THAT(
      Error("provider: {type: local}\nmax_nodes: 0\nnode_types: {a: {resources: {CPU: 1}}}\n"),
      StartsWith("autoscaler.yaml:2: max_nodes: expected a positive integer, got \"0\""));
  // Quoted scalars are strings, however they read.
  CHECK_THAT(
      Error("provider: {type: local}\nmax_nodes: \"4\"\nnode_types: {a: {resources: {CPU: 1}}}\n"),
      StartsWith("autoscaler.yaml:2: max_nodes: expected a positive integer"));
  CHECK_THAT(Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  a:
    resources: {CPU: -1}
)"),
             StartsWith("autoscaler.yaml:5: node_types.a.resources.CPU: expected a non-negative"));
  CHECK_THAT(Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  a:
    resources: {CPU: 1}
    cost: 0
)"),
             StartsWith("autoscaler.yaml:6: node_types.a.cost: expected a positive number"));
}

TEST_CASE("timeouts, intervals and the upscaling speed must be positive", "[autoscaler_config]") {
  for (const char* key :
       {"idle_timeout_s", "update_interval_s", "launch_timeout_s", "upscaling_speed"}) {
    for (const char* value : {"0", "-1", "soon"}) {
      std::string text = std::string("provider: {type: local}\nmax_nodes: 2\n") + key + ": " +
                         value + "\nnode_types: {a: {resources: {CPU: 1}}}\n";
      CHECK_THAT(Error(text), StartsWith(std::string("autoscaler.yaml:3: ") + key +
                                         ": expected a positive number, got \"" + value + "\""));
    }
  }
}

TEST_CASE("an unknown key is an error listing the allowed keys", "[autoscaler_config]") {
  CHECK(Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  cpu2:
    resources: {CPU: 2}
    min_node: 1
)") == "autoscaler.yaml:6: node_types.cpu2.min_node: unknown key (allowed: resources, labels, "
       "min_nodes, max_nodes, cost, provider)");
  CHECK_THAT(
      Error("provider: {type: local}\nmax_node: 4\nnode_types: {a: {resources: {CPU: 1}}}\n"),
      StartsWith("autoscaler.yaml:2: max_node: unknown key (allowed: provider, max_nodes, "));
  CHECK_THAT(Error("provider: {type: local, partition: a}\nnode_types: {}\n"),
             StartsWith("autoscaler.yaml:1: provider.partition: unknown key (allowed: type, "
                        "rayd_binary, object_store_memory)"));
}

TEST_CASE("provider and node_types are required and checked", "[autoscaler_config]") {
  CHECK_THAT(Error("max_nodes: 4\nnode_types: {a: {resources: {CPU: 1}}}\n"),
             StartsWith("autoscaler.yaml:1: provider: required"));
  CHECK_THAT(Error("provider:\n  type: cloud\nnode_types: {a: {resources: {CPU: 1}}}\n"),
             StartsWith("autoscaler.yaml:2: provider.type: expected one of local, slurm, command, "
                        "got \"cloud\""));
  CHECK_THAT(Error("provider:\n  rayd_binary: x\nnode_types: {a: {resources: {CPU: 1}}}\n"),
             StartsWith("autoscaler.yaml:1: provider.type: required"));
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\n"),
             StartsWith("autoscaler.yaml:1: node_types: required"));
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\nnode_types: {}\n"),
             StartsWith("autoscaler.yaml:3: node_types: expected at least one node type"));
  CHECK(Error("provider: {type: local}\nmax_nodes: 4\nnode_types:\n  a:\n    labels: {x: y}\n") ==
        "autoscaler.yaml:4: node_types.a.resources: required");
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\nnode_types:\n  a:\n    resources: {}\n"),
             StartsWith("autoscaler.yaml:5: node_types.a.resources: expected at least one"));
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\nnode_types: [a, b]\n"),
             StartsWith("autoscaler.yaml:3: node_types: expected a map, got a list"));
}

TEST_CASE("a command provider needs create, terminate and list", "[autoscaler_config]") {
  AutoscalerConfig c = Parse(R"(provider:
  type: command
  create: /opt/site/create
  terminate: [/opt/site/ctl, terminate]
  list: [/opt/site/ctl, list, --json]
max_nodes: 2
node_types:
  a: {resources: {CPU: 1}, provider: {image: base, disk_gb: 100, spot: true}}
)");
  CHECK(c.provider_type == "command");
  CHECK(c.provider["create"] == "/opt/site/create");
  CHECK(c.provider["list"] == nlohmann::json{"/opt/site/ctl", "list", "--json"});
  CHECK(c.node_types[0].provider ==
        nlohmann::json{{"image", "base"}, {"disk_gb", 100}, {"spot", true}});

  CHECK(Error(R"(max_nodes: 2
provider:
  type: command
  create: /opt/site/create
  terminate: /opt/site/terminate
node_types: {a: {resources: {CPU: 1}}}
)") == "autoscaler.yaml:2: provider.list: required by the command provider (an executable or a "
       "list)");
  CHECK_THAT(Error(R"(provider:
  type: command
  create: /opt/site/create
  terminate: []
  list: /opt/site/list
node_types: {a: {resources: {CPU: 1}}}
)"),
             StartsWith("autoscaler.yaml:4: provider.terminate: expected a string or a non-empty "
                        "list of strings, got a list"));
}

TEST_CASE("slurm keys are checked, for the provider and each node type", "[autoscaler_config]") {
  CHECK_THAT(Error(R"(provider:
  type: slurm
  sbatch_args: --exclusive
node_types: {a: {resources: {CPU: 1}, max_nodes: 1}}
)"),
             StartsWith("autoscaler.yaml:3: provider.sbatch_args: expected a non-empty list of "
                        "strings, got \"--exclusive\""));
  CHECK_THAT(Error(R"(provider: {type: slurm}
node_types:
  a:
    resources: {CPU: 1}
    max_nodes: 1
    provider: {partition: gpu, qos: high}
)"),
             StartsWith("autoscaler.yaml:6: node_types.a.provider.qos: unknown key (allowed: "
                        "partition, time_limit, sbatch_args, rayd_binary)"));
}

TEST_CASE("malformed YAML gives its line", "[autoscaler_config]") {
  std::string message = Error(R"(provider: {type: local}
max_nodes: 4
node_types:
  cpu2:
    resources: {CPU: 2
    min_nodes: 1
)");
  // yaml-cpp notices the unclosed `{` where the flow map should have ended.
  CHECK_THAT(message, StartsWith("autoscaler.yaml:6: YAML error: "));
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\n  bad: indent\n"),
             StartsWith("autoscaler.yaml:3: YAML error"));
  CHECK_THAT(Error("- a\n- b\n"), StartsWith("autoscaler.yaml:1: expected a map, got a list"));
}

TEST_CASE("duplicate keys and cyclic aliases are errors, not crashes", "[autoscaler_config]") {
  CHECK_THAT(Error("provider: {type: local}\nmax_nodes: 4\nmax_nodes: 5\nnode_types: {}\n"),
             StartsWith("autoscaler.yaml:3: max_nodes: duplicate key"));
  std::string bomb = "provider: {type: command, create: c, terminate: t, list: l}\n";
  bomb += "max_nodes: 2\nnode_types:\n  a:\n    resources: {CPU: 1}\n    provider:\n";
  bomb += "      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    std::string prev = "*l" + std::to_string(i - 1);
    bomb += "      l" + std::to_string(i) + ": &l" + std::to_string(i) + " [" + prev + ", " + prev +
            ", " + prev + ", " + prev + ", " + prev + ", " + prev + ", " + prev + ", " + prev +
            ", " + prev + ", " + prev + "]\n";
  }
  CHECK_THAT(Error(bomb), Contains("too large"));
}

TEST_CASE("LoadAutoscalerConfig reads a file and names it in errors", "[autoscaler_config]") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/autoscaler.yaml";
  {
    std::ofstream out(path);
    out << kMinimal;
  }
  Result<AutoscalerConfig> ok = LoadAutoscalerConfig(path);
  REQUIRE(ok.ok());
  CHECK(ok->node_types[0].name == "cpu2");

  {
    std::ofstream out(path);
    out << "provider: {type: local}\nmax_nodes: -1\nnode_types: {a: {resources: {CPU: 1}}}\n";
  }
  Result<AutoscalerConfig> bad = LoadAutoscalerConfig(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), StartsWith(path + ":2: max_nodes: "));

  Result<AutoscalerConfig> missing = LoadAutoscalerConfig(dir.path() + "/absent.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Contains(dir.path() + "/absent.yaml"));
  CHECK(LoadAutoscalerConfig(dir.path()).status().code() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace rayd::autoscaler
