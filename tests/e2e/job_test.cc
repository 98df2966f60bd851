// `rayd job` end to end (Ray Jobs' habit) against `rayd start --head`:
//   - submit ships the working directory (without .git), runs the command there on the head with
//     the runtime environment's variables, and the job's C++ driver (the quickstart) attaches to
//     the cluster through RAYD_ADDRESS; logs, status, list and the dashboard show it;
//   - stop ends a running job's whole process group (SIGTERM first: a driver that traps it
//     finishes its own way) and `logs --follow` ends with it; bad input gets one line;
//     `rayd stop --force` ends running drivers with the head;
//   - a job outlives a SIGKILL of its Redis-backed head: the restarted head adopts the running
//     driver, and learns how a driver that ended meanwhile finished.

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "rayd_sandbox.h"
#include "redis_server.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using rayd::testing::ChildProcess;
using rayd::testing::FreeTcpPort;
using rayd::testing::HttpGet;
using rayd::testing::ProcessGone;
using rayd::testing::ReadFile;
using rayd::testing::RedisServer;
using rayd::testing::TempDir;
using rayd::testing::WaitFor;
namespace fs = std::filesystem;

constexpr auto kSettle = 60s;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool IsOneLine(const std::string& out, const std::string& prefix) {
  return out.starts_with(prefix) && out.back() == '\n' &&
         std::count(out.begin(), out.end(), '\n') == 1;
}

void WriteExecutable(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
}

class JobSandbox : public rayd::testing::RaydSandbox {
 public:
  JobSandbox() : RaydSandbox(RAYD_BINARY, 90s) {}

  // `rayd job <args>`; its stdout and stderr in *out. --temp-dir goes before any `--`, after
  // which everything is the job's command.
  int Job(std::vector<std::string> args, std::string* out) {
    args.insert(args.begin() + std::min<size_t>(1, args.size()), {"--temp-dir", root()});
    args.insert(args.begin(), {RAYD_BINARY, "job"});
    return rayd::testing::RunCommand(args, out, Env(), 90s);
  }
  // The job's record (`rayd job status ID --format json`), or null when it cannot be read.
  json Status(const std::string& id) {
    std::string out;
    if (Job({"status", id, "--format", "json"}, &out) != 0) return nullptr;
    return json::parse(out, nullptr, false);
  }
  std::string Logs(const std::string& id) {
    std::string out;
    Job({"logs", id}, &out);
    return out;
  }
  // Submits with --no-wait and returns the submission id (the first line of stdout).
  std::string SubmitNoWait(std::vector<std::string> args) {
    args.insert(args.begin(), {"submit", "--no-wait"});
    std::string out;
    const int rc = Job(args, &out);
    INFO(out);
    REQUIRE(rc == 0);
    std::smatch m;
    REQUIRE(std::regex_search(out, m, std::regex(R"(Job '([^']+)' submitted)")));
    return m[1];
  }
};

// Runs `rayd job <args>` that must fail with one line naming every part.
void ExpectOneLineError(JobSandbox& sandbox, const std::vector<std::string>& args,
                        const std::string& command, const std::vector<std::string>& parts) {
  std::string out;
  const int rc = sandbox.Job(args, &out);
  INFO("rayd job " << args.front() << " printed:\n" << out);
  CHECK(rc != 0);
  CHECK(rc != -1);
  CHECK(IsOneLine(out, "rayd " + command + ": "));
  for (const auto& part : parts) CHECK(Contains(out, part));
}

}  // namespace

TEST_CASE("rayd job submit ships the working directory and its C++ driver attaches to the "
          "cluster through RAYD_ADDRESS",
          "[e2e]") {
  JobSandbox sandbox;
  const int dashboard_port = FreeTcpPort();
  sandbox.Start({"--head", "--port", std::to_string(FreeTcpPort()), "--num-cpus", "2",
                 "--dashboard-port", std::to_string(dashboard_port)});
  TempDir work;
  const fs::path wd = fs::path(work.path()) / "project";
  WriteExecutable(wd / "run.sh",
                  "#!/bin/sh\nset -e\n"
                  "echo \"greeting=$GREETING\"\n"
                  "cat data/input.txt\n"
                  "test ! -e .git && echo 'no .git here'\n"
                  "echo \"attaching to $RAYD_ADDRESS as $RAYD_JOB_SUBMISSION_ID\"\n"
                  "exec \"$1\"\n");
  fs::create_directories(wd / "data");
  std::ofstream(wd / "data" / "input.txt") << "shipped payload\n";
  fs::create_directories(wd / ".git");
  std::ofstream(wd / ".git" / "HEAD") << "ref: refs/heads/main\n";

  std::string out;
  const int rc = sandbox.Job({"submit", "--working-dir", wd.string(), "--submission-id",
                              "quickstart-job", "--runtime-env-json",
                              R"({"env_vars": {"GREETING": "hello from the runtime env"}})",
                              "--", "./run.sh", QUICKSTART_BINARY},
                             &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Contains(out, "greeting=hello from the runtime env"));
  CHECK(Contains(out, "shipped payload"));
  CHECK(Contains(out, "no .git here"));
  CHECK(Contains(out, "as quickstart-job"));
  CHECK(Contains(out, "Job 'quickstart-job' SUCCEEDED"));

  const json job = sandbox.Status("quickstart-job");
  REQUIRE(job.is_object());
  CHECK(job["status"] == "SUCCEEDED");
  CHECK(job["exit_code"] == 0);
  CHECK(job["end_time_ms"] >= job["start_time_ms"]);
  CHECK(Contains(sandbox.Logs("quickstart-job"), "shipped payload"));
  // The quickstart's own driver registered with the cluster as a job and finished.
  REQUIRE(sandbox.Rayd({"list", "jobs", "--format", "json"}, &out) == 0);
  const json drivers = json::parse(out, nullptr, false);
  REQUIRE(drivers.is_array());
  REQUIRE(!drivers.empty());
  CHECK(drivers.back()["status"] == "FINISHED");
  REQUIRE(sandbox.Job({"list"}, &out) == 0);
  CHECK(Contains(out, "quickstart-job"));
  CHECK(Contains(out, "SUCCEEDED"));

  // The dashboard lists it, with its log.
  const std::string token =
      ReadFile(sandbox.Sessions("_head").front() + "/token").substr(0, 64);
  const std::string bearer = "Authorization: Bearer " + token + "\r\n";
  const auto list = HttpGet(dashboard_port, "/api/jobs", bearer);
  REQUIRE(list.status == 200);
  const json listed = json::parse(list.body, nullptr, false);
  REQUIRE(listed.contains("jobs"));
  CHECK(listed["jobs"].size() == 1);
  CHECK(listed["jobs"][0]["submission_id"] == "quickstart-job");
  const auto detail = HttpGet(dashboard_port, "/api/jobs/quickstart-job", bearer);
  REQUIRE(detail.status == 200);
  CHECK(Contains(json::parse(detail.body)["logs"].get<std::string>(), "shipped payload"));
  CHECK(HttpGet(dashboard_port, "/api/jobs/nosuch", bearer).status == 404);
  CHECK(HttpGet(dashboard_port, "/api/jobs").status == 401);
}

TEST_CASE("rayd job stop ends a running job's process group and bad input gets one line",
          "[e2e]") {
  JobSandbox sandbox;
  sandbox.Start({"--head", "--port", std::to_string(FreeTcpPort()), "--num-cpus", "1",
                 "--include-dashboard", "false"});
  // A driver with a child of its own, that finishes its own way on SIGTERM.
  const std::string id = sandbox.SubmitNoWait(
      {"--", "sh", "-c",
       "sleep 300 & echo \"started, child $!\"; trap 'echo stopping gracefully; exit 3' TERM; "
       "while :; do sleep 0.1; done"});
  REQUIRE(WaitFor([&] { return Contains(sandbox.Logs(id), "started"); }, kSettle));
  const json running = sandbox.Status(id);
  REQUIRE(running["status"] == "RUNNING");
  const pid_t driver = running["pid"].get<int>();
  std::smatch m;
  const std::string started = sandbox.Logs(id);
  REQUIRE(std::regex_search(started, m, std::regex(R"(child (\d+))")));
  const pid_t child = std::stoi(m[1]);

  ChildProcess follow({RAYD_BINARY, "job", "logs", id, "--follow", "--temp-dir", sandbox.root()},
                      sandbox.Env());
  std::string out;
  REQUIRE(sandbox.Job({"stop", id}, &out) == 0);
  CHECK(Contains(out, "STOPPED"));
  CHECK(Contains(out, "exited with code 3"));
  REQUIRE(follow.WaitExit(kSettle));
  CHECK(follow.exit_code() == 0);
  CHECK(Contains(follow.output(), "stopping gracefully"));
  CHECK(WaitFor([&] { return ProcessGone(driver) && ProcessGone(child); }, kSettle));
  const json stopped = sandbox.Status(id);
  CHECK(stopped["status"] == "STOPPED");
  CHECK(stopped["exit_code"] == 3);

  // A driver that fails.
  CHECK(sandbox.Job({"submit", "--submission-id", "fails", "--", "sh", "-c", "exit 7"}, &out) == 1);
  CHECK(Contains(out, "Job 'fails' FAILED: its driver exited with code 7"));
  CHECK(sandbox.Status("fails")["exit_code"] == 7);

  ExpectOneLineError(sandbox, {"stop", id}, "job stop", {id, "has already ended", "STOPPED"});
  ExpectOneLineError(sandbox, {"status", "nosuch"}, "job status", {"no job", "nosuch"});
  ExpectOneLineError(sandbox, {"logs", "nosuch"}, "job logs", {"no job", "nosuch"});
  ExpectOneLineError(sandbox, {"submit", "--working-dir", "/nonexistent/dir", "--", "true"},
                     "job submit", {"/nonexistent/dir", "does not exist"});
  ExpectOneLineError(sandbox, {"submit", "--", "no-such-command-here", "x"}, "job submit",
                     {"command not found: no-such-command-here"});
  ExpectOneLineError(sandbox, {"submit", "--submission-id", "fails", "--", "true"}, "job submit",
                     {"fails", "exists"});
  ExpectOneLineError(sandbox, {"submit", "--runtime-env-json", R"({"pip": ["torch"]})", "--",
                               "true"},
                     "job submit", {"'pip'", "not supported"});
  ExpectOneLineError(sandbox, {"submit", "--runtime-env-json", "{oops", "--", "true"},
                     "job submit", {"must be a JSON object"});
  ExpectOneLineError(sandbox, {"submit", "--address", "127.0.0.1:1", "--", "true"}, "job submit",
                     {"cannot reach the cluster at 127.0.0.1:1"});
  std::string no_command;
  CHECK(sandbox.Job({"submit"}, &no_command) == 2);
  CHECK(Contains(no_command, "give the command to run after `--`"));

  // `rayd stop --force` kills the head without asking it: the drivers it ran go too.
  const std::string sleeper = sandbox.SubmitNoWait({"--", "sleep", "300"});
  const pid_t sleeper_pid = sandbox.Status(sleeper)["pid"].get<int>();
  REQUIRE(sandbox.Rayd({"stop", "--force"}, &out) == 0);
  INFO(out);
  CHECK(Contains(out, "1 job driver"));
  CHECK(WaitFor([&] { return ProcessGone(sleeper_pid); }, kSettle));
}

TEST_CASE("a job outlives a SIGKILL of its Redis-backed head: the restarted head adopts its "
          "driver and records how a driver that ended meanwhile finished",
          "[e2e]") {
  RedisServer redis;
  JobSandbox sandbox;
  const std::vector<std::string> head = {"--head", "--port", std::to_string(FreeTcpPort()),
                                         "--num-cpus", "1", "--include-dashboard", "false",
                                         "--redis-address", redis.Address()};
  sandbox.Start(head);
  // Each driver waits for a file in its working directory, then exits with a code of its own.
  auto waiting = [](const std::string& file, int code) {
    return "echo waiting; while [ ! -e " + file + " ]; do sleep 0.05; done; echo released; exit " +
           std::to_string(code);
  };
  const std::string adopted = sandbox.SubmitNoWait({"--", "sh", "-c", waiting("go", 5)});
  const std::string ended = sandbox.SubmitNoWait({"--", "sh", "-c", waiting("go", 0)});
  const json adopted_job = sandbox.Status(adopted), ended_job = sandbox.Status(ended);
  REQUIRE(adopted_job["status"] == "RUNNING");
  REQUIRE(ended_job["status"] == "RUNNING");

  const auto pids = rayd::testing::DaemonPids(sandbox.root());  // head.pid, node.pid: one process
  const std::set<pid_t> head_pid(pids.begin(), pids.end());
  REQUIRE(head_pid.size() == 1);
  ::kill(*head_pid.begin(), SIGKILL);
  REQUIRE(WaitFor([&] { return ProcessGone(*head_pid.begin()); }, kSettle));
  // While the head is down, one driver ends.
  std::ofstream(ended_job["working_dir"].get<std::string>() + "/go").close();
  REQUIRE(WaitFor([&] { return ProcessGone(ended_job["pid"].get<int>()); }, kSettle));
  CHECK(!ProcessGone(adopted_job["pid"].get<int>()));

  sandbox.Start(head);
  const json recovered = sandbox.Status(ended);
  CHECK(recovered["status"] == "SUCCEEDED");
  CHECK(recovered["exit_code"] == 0);
  CHECK(Contains(sandbox.Logs(ended), "released"));
  CHECK(sandbox.Status(adopted)["status"] == "RUNNING");
  std::ofstream(adopted_job["working_dir"].get<std::string>() + "/go").close();
  REQUIRE(WaitFor([&] { return sandbox.Status(adopted)["status"] == "FAILED"; }, kSettle));
  const json failed = sandbox.Status(adopted);
  CHECK(failed["exit_code"] == 5);
  CHECK(Contains(failed["message"].get<std::string>(), "exited with code 5"));
  CHECK(Contains(sandbox.Logs(adopted), "released"));
}
