// Resource requests checked at submission (rayd/api/task_options.h), the program's own log
// (RaydLog::StartRaydLog, RAYD_CHECK) and the reference table's public face, against the fake
// runtime.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>

#include "fake_runtime.h"
#include "rayd/api.h"
#include "rayd/util/logging.h"
#include "test_util.h"

namespace optionstest {
int Twice(int x) { return 2 * x; }
class Box {
 public:
  static Box* Create() { return new Box; }
  int Get() { return 7; }
};
}  // namespace optionstest

RAYD_REMOTE(optionstest::Twice, optionstest::Box::Create, &optionstest::Box::Get);

namespace rayd {
namespace {

using Catch::Matchers::Contains;
using testing::FakeRuntime;

std::string Refusal(const std::map<std::string, double>& resources) {
  try {
    internal::CheckTaskOptions(resources);
  } catch (const RaydError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("options: resource requests follow Ray's rule", "[api][options]") {
  CHECK(Refusal({{"CPU", 1}, {"GPU", 0.25}, {"custom", 3}, {"memory", 0.5}}).empty());
  CHECK(Refusal({{"CPU", 0}, {"GPU", 0}}).empty());  // "none", as Ray's num_cpus=0
  CHECK_THAT(Refusal({{"", 1}}), Contains("needs a name"));
  CHECK_THAT(Refusal({{"dummy", 0}}), Contains("\"dummy\"") && Contains("asks for nothing"));
  CHECK_THAT(Refusal({{"CPU", -1}}), Contains("must be positive"));
  CHECK_THAT(Refusal({{"GPU", 2.5}}), Contains("\"GPU\"") && Contains("whole number"));
  CHECK_THAT(Refusal({{"CPU", std::nan("")}}), Contains("must be positive"));
  // Ray's own sequence (its TaskOptionsCheckTest), on Ray's map type.
  std::unordered_map<std::string, double> map{{"dummy", 2.0}};
  CHECK_NOTHROW(internal::CheckTaskOptions(map));
  map.emplace("dummy1", 2.5);
  CHECK_THROWS_AS(internal::CheckTaskOptions(map), RaydError);
}

TEST_CASE("options: a task, an actor and an actor call refuse bad resources at submission",
          "[api][options]") {
  FakeRuntime fake;
  CHECK_THROWS_WITH(Task(optionstest::Twice).SetResource("CPU", 1.5).Remote(1),
                    Contains("whole number"));
  CHECK(fake.last_task_args.empty());  // nothing was submitted
  CHECK(*Task(optionstest::Twice).SetResource("CPU", 0.5).Remote(2).Get() == 4);
  CHECK_THROWS_WITH(Actor(optionstest::Box::Create).SetResources({{"slot", 0}}).Remote(),
                    Contains("asks for nothing"));
  auto box = Actor(optionstest::Box::Create).SetResources({{"CPU", 0}}).Remote();
  CHECK_THROWS_AS(box.Task(&optionstest::Box::Get).SetResource("", 1), RaydError);
  CHECK(*box.Task(&optionstest::Box::Get).SetResource("CPU", 1).Remote().Get() == 7);
}

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("options: StartRaydLog sends RAYDLOG's lines to the program's own file",
          "[api][options]") {
  testing::TempDir dir;
  const std::filesystem::path log_dir = std::filesystem::path(dir.path()) / "logs" / "deeper";
  RaydLog::StartRaydLog("cpp_worker", RaydLogLevel::DEBUG, log_dir.string());
  int evaluated = 0;
  RAYDLOG(DEBUG) << "debug test " << ++evaluated;
  RAYDLOG(INFO) << "info test";
  RAYDLOG(WARNING) << "warning test";
  RAYD_CHECK(evaluated == 1) << "not written";
  CHECK(RaydLog::IsLevelEnabled(RaydLogLevel::DEBUG));
  RaydLog::ShutDownRaydLog();
  RAYDLOG(INFO) << "after the program's log ended";

  const std::filesystem::path file =
      log_dir / ("cpp_worker_" + std::to_string(::getpid()) + ".log");
  REQUIRE(std::filesystem::exists(file));
  CHECK(evaluated == 1);
  std::istringstream lines(ReadAll(file));
  std::string line;
  for (const char* expected : {"debug test 1", "info test", "warning test"}) {
    REQUIRE(std::getline(lines, line));
    CHECK_THAT(line, Contains(expected));
  }
  CHECK_FALSE(std::getline(lines, line));  // neither the check nor the line after Shutdown
  const char* level = std::getenv("RAYD_LOG_LEVEL");
  if (level == nullptr) CHECK_FALSE(RaydLog::IsLevelEnabled(RaydLogLevel::DEBUG));

  CHECK_THROWS_WITH(RaydLog::StartRaydLog("x", RaydLogLevel::INFO, "/proc/no/such/dir"),
                    Contains("/proc/no/such/dir"));
}

TEST_CASE("options: ObjectID::FromBinary reads what ObjectRef::ID gives", "[api][options]") {
  const ObjectID id = ObjectID::FromRandom();
  CHECK(ObjectID::FromBinary(id.Hex()) == id);
  const auto& bytes = id.bytes();
  CHECK(ObjectID::FromBinary(std::string(bytes.begin(), bytes.end())) == id);
  CHECK(ObjectID::FromBinary("not an id").IsNil());
}

}  // namespace
}  // namespace rayd
