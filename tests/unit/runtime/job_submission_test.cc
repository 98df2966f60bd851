// A submitted job's working directory on the wire (runtime/src/common/job_submission.h): what
// is packed (directories, files and their modes; not .git, not sockets), the size limit, and
// an unpacking that never writes outside its directory, whatever a request holds.

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <capnp/message.h>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/job_submission.h"
#include "test_util.h"

namespace rayd::runtime {
namespace {

namespace fs = std::filesystem;
using rayd::testing::ReadFile;
using rayd::testing::TempDir;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("a working directory packs and unpacks with its files and modes, without .git",
          "[job]") {
  TempDir from, to;
  const fs::path src = from.path();
  Write(src / "run.sh", "#!/bin/sh\necho hi\n");
  fs::permissions(src / "run.sh", fs::perms::owner_all);
  Write(src / "data" / "deep" / "x.txt", "payload");
  Write(src / ".git" / "HEAD", "ref");
  fs::create_directories(src / "empty");
  fs::create_symlink(src / "data" / "deep" / "x.txt", src / "link.txt");
  // A socket is no file to ship.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = (src / "s.sock").string();
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  auto entries = ReadWorkingDir(src.string(), 1 << 20);
  ::close(fd);
  REQUIRE(entries.ok());
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<proto::SubmitJobRequest>();
  PackWorkingDir(*entries, request.initFiles(static_cast<unsigned>(entries->size())));
  REQUIRE(UnpackWorkingDir(request.asReader().getFiles(), to.path()).ok());

  const fs::path dst = to.path();
  CHECK(ReadFile(dst / "run.sh") == "#!/bin/sh\necho hi\n");
  CHECK((fs::status(dst / "run.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  CHECK(ReadFile(dst / "data" / "deep" / "x.txt") == "payload");
  CHECK(ReadFile(dst / "link.txt") == "payload");  // the file a link names
  CHECK(fs::is_directory(dst / "empty"));
  CHECK(!fs::exists(dst / ".git"));
  CHECK(!fs::exists(dst / "s.sock"));
}

TEST_CASE("a working directory too large, or missing, is refused by name", "[job]") {
  TempDir from;
  Write(fs::path(from.path()) / "big.bin", std::string(2048, 'x'));
  auto big = ReadWorkingDir(from.path(), 1024);
  REQUIRE(!big.ok());
  CHECK(big.status().code() == StatusCode::kResourceExhausted);
  CHECK(big.status().message().find(from.path()) != std::string::npos);
  auto missing = ReadWorkingDir(from.path() + "/nope", 1024);
  REQUIRE(!missing.ok());
  CHECK(missing.status().message().find("does not exist") != std::string::npos);
  auto file = ReadWorkingDir(from.path() + "/big.bin", 1 << 20);
  REQUIRE(!file.ok());
  CHECK(file.status().message().find("is not a directory") != std::string::npos);
}

TEST_CASE("unpacking refuses paths that would leave the job's directory", "[job]") {
  for (const std::string bad : {"../escape.txt", "/tmp/absolute.txt", "a/../../escape.txt", "",
                                "./dot.txt"}) {
    TempDir parent;
    const std::string into = parent.path() + "/wd";
    fs::create_directories(into);
    capnp::MallocMessageBuilder message;
    auto files = message.initRoot<proto::SubmitJobRequest>().initFiles(1);
    files[0].setPath(bad);
    files[0].setMode(0644);
    Status s = UnpackWorkingDir(files.asReader(), into);
    INFO(bad);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(!fs::exists(parent.path() + "/escape.txt"));
  }
}

}  // namespace rayd::runtime
