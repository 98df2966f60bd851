// TensorBoard event files per trial (tune/src/tensorboard_sink.h, event_file.h): the TFRecord
// framing with its CRCs, and every result's numbers read back as scalars at their steps.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "event_file.h"
#include "tensorboard_sink.h"
#include "test_util.h"

namespace rayd::tune::internal {
namespace {

namespace fs = std::filesystem;
using rayd::testing::TempDir;

// The event files under `dir`.
std::vector<std::string> EventFiles(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      files.push_back(entry.path().string());
    }
  }
  return files;
}

std::map<std::string, float> Scalars(const rayd::tensorboard::Event& event) {
  std::map<std::string, float> out;
  for (const auto& v : event.summary().value()) out[v.tag()] = v.simple_value();
  return out;
}

}  // namespace

TEST_CASE("CRC-32C is the Castagnoli CRC TFRecord uses", "[tensorboard]") {
  CHECK(Crc32c("123456789") == 0xe3069283u);  // the standard check value
  CHECK(Crc32c("") == 0u);
}

TEST_CASE("a trial's results become TensorBoard scalars at their training iterations",
          "[tensorboard]") {
  TempDir dir;
  TensorBoardSink sink(dir.path());
  Trial trial = MakeTrial("3fa2c", 0, "loop", nlohmann::json::object());
  trial.history.push_back({});
  sink.OnResult(trial, {{"loss", 0.5}, {"training_iteration", 1}, {"time_this_iter_s", 0.25}});
  trial.history.push_back({});
  sink.OnResult(trial, {{"loss", 0.125}, {"training_iteration", 2}});
  Trial other = MakeTrial("3fa2c", 1, "loop", nlohmann::json::object());
  sink.OnResult(other, {{"accuracy", 0.75}});  // no training_iteration: its result count
  // Events are written at the controller's tick, or when the trial ends (its file closes).
  trial.status = TrialStatus::kTerminated;
  sink.OnStatus(trial);
  other.status = TrialStatus::kError;
  sink.OnStatus(other);

  const auto files = EventFiles(fs::path(dir.path()) / trial.dir_name);
  REQUIRE(files.size() == 1);
  auto events = ReadEventFile(files[0]);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 3);
  CHECK((*events)[0].file_version() == "brain.Event:2");
  CHECK((*events)[0].wall_time() > 1.7e9);
  CHECK((*events)[1].step() == 1);
  CHECK(Scalars((*events)[1]) == std::map<std::string, float>{{"ray/tune/loss", 0.5f},
                                                               {"ray/tune/training_iteration", 1},
                                                               {"ray/tune/time_this_iter_s", 0.25f}});
  CHECK((*events)[2].step() == 2);
  CHECK(Scalars((*events)[2])["ray/tune/loss"] == 0.125f);
  CHECK((*events)[2].wall_time() >= (*events)[1].wall_time());

  const auto other_files = EventFiles(fs::path(dir.path()) / other.dir_name);
  REQUIRE(other_files.size() == 1);
  auto other_events = ReadEventFile(other_files[0]);
  REQUIRE(other_events.ok());
  REQUIRE(other_events->size() == 2);
  CHECK((*other_events)[1].step() == 0);
  CHECK(Scalars((*other_events)[1])["ray/tune/accuracy"] == 0.75f);
}

TEST_CASE("a corrupt or truncated event file is refused, naming the record", "[tensorboard]") {
  TempDir dir;
  const std::string path = dir.path() + "/events.out.tfevents.1.test";
  {
    auto writer = EventFileWriter::Create(path, 1.0);
    REQUIRE(writer.ok());
    REQUIRE(writer->WriteScalars(1, 2.0, {{"a", 1.0}}).ok());
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  REQUIRE(ReadEventFile(path).ok());
  SECTION("a flipped byte in the second record's data") {
    bytes[bytes.size() - 6] ^= 0x40;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto events = ReadEventFile(path);
    REQUIRE_FALSE(events.ok());
    CHECK(events.status().message().find("record 1: its data's CRC does not match") !=
          std::string::npos);
  }
  SECTION("the last bytes missing") {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
    auto events = ReadEventFile(path);
    REQUIRE_FALSE(events.ok());
    CHECK(events.status().message().find("record 1 is truncated") != std::string::npos);
  }
}

TEST_CASE("a trial whose directory cannot hold files costs a warning, not the sweep",
          "[tensorboard]") {
  TempDir dir;
  Trial trial = MakeTrial("3fa2c", 0, "loop", nlohmann::json::object());
  std::ofstream(dir.path() + "/" + trial.dir_name) << "a file where the directory should be";
  TensorBoardSink sink(dir.path());
  sink.OnResult(trial, {{"loss", 1}});
  sink.OnResult(trial, {{"loss", 2}});  // warned once; nothing thrown
  CHECK(fs::is_regular_file(dir.path() + "/" + trial.dir_name));
}

}  // namespace rayd::tune::internal
