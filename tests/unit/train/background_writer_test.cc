// The writer behind asynchronous checkpoints: jobs run in the order posted, Drain waits for all
// of them and hands over the first failure once, and destroying the writer still runs what was
// posted (a loop's last reports are shipped, never dropped).

#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <vector>

#include "background_writer.h"

namespace rayd::train::internal {
namespace {

TEST_CASE("the background writer runs jobs in order and keeps the first failure", "[train]") {
  BackgroundWriter writer;
  std::vector<int> ran;  // written by the writer's thread only, read after Drain
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  writer.Post([&, released] {
    released.wait();  // the loop goes on posting while the first job is held
    ran.push_back(1);
    return Status::Ok();
  });
  writer.Post([&] {
    ran.push_back(2);
    return Status::Internal("disk full");
  });
  writer.Post([&] {
    ran.push_back(3);
    return Status::Internal("second failure");
  });
  CHECK(writer.TakeError().ok());  // nothing has failed yet: job 1 is held
  release.set_value();
  Status drained = writer.Drain();
  CHECK(ran == std::vector<int>{1, 2, 3});  // a failure does not stop the jobs after it
  CHECK(drained.code() == StatusCode::kInternal);
  CHECK(drained.message() == "disk full");
  CHECK(writer.Drain().ok());  // handed over once
}

TEST_CASE("destroying the background writer runs what is still posted", "[train]") {
  std::vector<std::string> shipped;
  {
    BackgroundWriter writer;
    for (int i = 0; i < 50; ++i) {
      writer.Post([&, i] {
        shipped.push_back("report " + std::to_string(i));
        return Status::Ok();
      });
    }
  }
  REQUIRE(shipped.size() == 50);
  CHECK(shipped.back() == "report 49");
  BackgroundWriter idle;  // never posted to: no thread to join
  CHECK(idle.Drain().ok());
}

}  // namespace
}  // namespace rayd::train::internal
