#include "chaos_driver.h"

#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace rayd::testing::chaos {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr auto kPollInterval = 250ms;

// VmRSS of `pid` in MiB; 0 when it cannot be read.
double RssMib(pid_t pid) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return 0;
}

// utime + stime of `pid`, in clock ticks; -1 when it cannot be read.
long CpuTicks(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return -1;
  std::istringstream in(stat.substr(close + 2));  // from field 3, the state
  std::string field;
  long ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::atol(field.c_str());  // utime, stime
  }
  return ticks;
}

std::string Tail(const std::string& text, size_t chars = 3000) {
  return text.size() <= chars ? text : "..." + text.substr(text.size() - chars);
}

}  // namespace

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kWorker:
      return "worker-sigkill";
    case Kind::kNode:
      return "node-sigkill";
    case Kind::kLink:
      return "link-cut";
    case Kind::kHead:
      return "head-sigkill";
    case Kind::kDriver:
      return "driver-sigkill";
  }
  return "?";
}

std::vector<pid_t> LiveDaemons(const std::string& root) {
  std::vector<pid_t> live;
  for (pid_t pid : DaemonPids(root)) {
    if (IsRaydProcess(pid) && std::find(live.begin(), live.end(), pid) == live.end()) {
      live.push_back(pid);
    }
  }
  return live;
}

// ---- HeadMemory --------------------------------------------------------------------------------

void HeadMemory::Sample() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < 1s) return;
  last_ = now;
  const std::vector<pid_t> heads = LiveDaemons(root_);
  if (heads.size() != 1) return;  // being restarted
  const double mib = RssMib(heads[0]);
  if (mib <= 0) return;
  pids_.insert(heads[0]);
  latest_ = mib;
  peak_ = std::max(peak_, mib);
  if (warm_ == 0 && warm_wanted_) warm_ = mib;
}

double HeadMemory::SampleNow() {
  last_ = {};
  Sample();
  return latest_;
}

void HeadMemory::MarkWarm() {
  warm_wanted_ = true;
  SampleNow();
}

// ---- SweepSeries -------------------------------------------------------------------------------

void SweepSeries::StartNext() {
  Sweep s;
  s.name = "chaos-" + std::to_string(sweeps_.size());
  s.yaml = WriteSweep(dir_, s.name, kEpochs, kMaxFailures);
  s.experiment = dir_ + "/results/" + s.name;
  sweeps_.push_back(std::move(s));
  driver_ = StartSweep(cluster_, kDriverHost, sweeps_.back().yaml);
}

void SweepSeries::Pump(bool keep_going) {
  if (driver_ && !driver_->running()) {
    Sweep& s = sweeps_.back();
    s.exit_code = driver_->exit_code();
    s.output = Tail(driver_->output());
    driver_.reset();
  }
  if (!driver_ && keep_going) StartNext();
}

bool SweepSeries::Progressing() {
  if (!driver_running()) return false;
  bool reported = false, unfinished = false;
  for (const auto& r : ReadTrials(current().experiment)) {
    reported = reported || !r.epochs.empty();
    unfinished = unfinished || r.status != "TERMINATED";
  }
  return reported && unfinished;
}

void SweepSeries::KillDriverAndResume() {
  driver_->Signal(SIGKILL);
  REQUIRE(driver_->WaitExit(kSettle));
  ++sweeps_.back().resumes;
  driver_ = StartSweep(cluster_, kDriverHost, sweeps_.back().yaml, /*resume=*/true);
}

TrialProgress SweepSeries::Snapshot() const {
  TrialProgress out;
  for (const auto& r : ReadTrials(current().experiment)) {
    out[r.id] = {r.epochs.empty() ? -1 : r.epochs.back(), r.status};
  }
  return out;
}

SweepSeries::Progress SweepSeries::Progressed(size_t index, const TrialProgress& before) const {
  std::map<std::string, TrialRecord> now;
  for (auto& r : ReadTrials(sweeps_[index].experiment)) now[r.id] = std::move(r);
  Progress progress = Progress::kYes;
  for (const auto& [id, was] : before) {
    if (was.second == "TERMINATED") continue;
    auto it = now.find(id);
    if (it == now.end()) return Progress::kNotYet;  // the state file is being rewritten
    const TrialRecord& r = it->second;
    if (r.status == "ERROR") return Progress::kNever;
    const int last = r.epochs.empty() ? -1 : r.epochs.back();
    if (r.status != "TERMINATED" && last < was.first + 2) progress = Progress::kNotYet;
  }
  return progress;
}

void SweepSeries::Check() {
  std::vector<int> epochs(kEpochs), iterations(kEpochs);
  for (int e = 0; e < kEpochs; ++e) {
    epochs[e] = e;
    iterations[e] = e + 1;
  }
  for (Sweep& s : sweeps_) {
    s.problems.clear();
    if (s.exit_code != 0) {
      s.problems.push_back("its driver exited with " + std::to_string(s.exit_code));
    }
    const auto trials = ReadTrials(s.experiment);
    if (trials.size() != static_cast<size_t>(kTrials)) {
      s.problems.push_back(std::to_string(trials.size()) + " trials, not " +
                           std::to_string(kTrials));
    }
    for (const auto& r : trials) {
      if (r.status != "TERMINATED") s.problems.push_back("trial " + r.id + " is " + r.status);
      if (r.epochs == epochs && r.iterations == iterations) continue;
      std::ostringstream what;
      what << "trial " << r.id << " reported epochs";
      for (int e : r.epochs) what << ' ' << e;
      what << " / training_iteration";
      for (int i : r.iterations) what << ' ' << i;
      s.problems.push_back(what.str());
    }
  }
}

// ---- ChaosDriver -------------------------------------------------------------------------------

void ChaosDriver::Tick() {
  sweeps_.Pump(launching_);
  memory_.Sample();
}

bool ChaosDriver::Until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    Tick();
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
}

void ChaosDriver::Wait(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  Until([&] { return std::chrono::steady_clock::now() >= until; }, 1h);
}

void ChaosDriver::Run(double seconds) {
  std::vector<Kind> first(kKinds.begin(), kKinds.end());
  std::shuffle(first.begin(), first.end(), rng_);
  const double start = WallSeconds();
  std::uniform_real_distribution<double> gap(2, 8);
  std::uniform_int_distribution<size_t> any_kind(0, kKinds.size() - 1);
  while (faults_.size() < first.size() || WallSeconds() - start < seconds) {
    const Kind kind =
        faults_.size() < first.size() ? first[faults_.size()] : kKinds[any_kind(rng_)];
    Wait(gap(rng_));
    INFO("waiting for a sweep to make progress before " << KindName(kind));
    REQUIRE(Until([&] { return sweeps_.Progressing(); }, kSweepTimeout));
    if (faults_.empty()) memory_.MarkWarm();
    const Fault& f = Inject(kind);
    char outcome[64] = "NOT RECOVERED";
    if (f.recovery_s) std::snprintf(outcome, sizeof outcome, "recovered in %.2f s", *f.recovery_s);
    std::printf("CHAOS fault %zu %s at +%.1f s in %s: %s: %s\n", faults_.size(), KindName(kind),
                f.at - start, sweeps_.sweeps()[f.sweep].name.c_str(), f.detail.c_str(), outcome);
    std::fflush(stdout);
    if (!f.recovery_s) return;  // the cluster is not whole: the final checks say what is left
  }
}

Fault& ChaosDriver::Inject(Kind kind) {
  faults_.push_back({kind, 0, sweeps_.current_index(), "", std::nullopt});
  Fault& f = faults_.back();
  switch (kind) {
    case Kind::kWorker:
      KillWorker(f);
      break;
    case Kind::kNode:
      KillNode(f);
      break;
    case Kind::kLink:
      CutLink(f);
      break;
    case Kind::kHead:
      KillHead(f);
      break;
    case Kind::kDriver:
      KillDriver(f);
      break;
  }
  SweepSeries::Progress progress = SweepSeries::Progress::kNotYet;
  const bool ended = Until(
      [&] {
        progress = sweeps_.Progressed(f.sweep, before_);
        return progress == SweepSeries::Progress::kNever ||
               (progress == SweepSeries::Progress::kYes && Whole());
      },
      kRecoveryDeadline);
  if (ended && progress == SweepSeries::Progress::kYes) f.recovery_s = WallSeconds() - f.at;
  if (progress == SweepSeries::Progress::kNever) f.detail += "; a trial it hit ended in ERROR";
  return f;
}

void ChaosDriver::Mark(Fault& f) {
  // The sweep and its snapshot together: while a fault waited for a target (a rank to kill),
  // the sweep it was meant for may have ended and the next begun.
  f.sweep = sweeps_.current_index();
  before_ = sweeps_.Snapshot();
  f.at = WallSeconds();
}

bool ChaosDriver::Whole() {
  auto status = cluster_.TryStatus();
  if (!status) return false;
  for (int host = 0; host < cluster_.bed().size(); ++host) {
    bool alive = false;
    for (const auto& n : status->at("nodes")) {
      alive = alive || (n.at("ip") == cluster_.bed().ip(host) && n.at("state") == "ALIVE");
    }
    if (!alive) return false;
  }
  return true;
}

// The sweeps lease workers only for their rank actors. (`rayd list workers` leaves a worker's
// actor_id empty, and `rayd list actors` an actor's pid, so the lease is what marks a rank.)
std::map<pid_t, int> ChaosDriver::Ranks() {
  std::map<pid_t, int> ranks;
  auto workers = cluster_.TryJson({"list", "workers"});
  if (!workers) return ranks;
  std::set<pid_t> leased;
  for (const auto& w : *workers) {
    if (w.at("state") == "LEASED" && w.value("pid", 0) > 0) leased.insert(w.at("pid").get<pid_t>());
  }
  for (int host = kFirstTrainingHost; host < kHosts; ++host) {
    for (pid_t pid : cluster_.bed().Pids(host)) {
      if (leased.count(pid)) ranks[pid] = host;
    }
  }
  return ranks;
}

std::optional<std::pair<pid_t, int>> ChaosDriver::PickRank() {
  std::map<pid_t, int> ranks;
  if (!Until([&] { return !(ranks = Ranks()).empty(); }, kSettle)) return std::nullopt;
  std::map<pid_t, long> ticks;
  for (const auto& [pid, host] : ranks) ticks[pid] = CpuTicks(pid);
  Wait(0.5);
  std::vector<std::pair<pid_t, int>> busy, all;
  for (const auto& [pid, host] : ranks) {
    if (!IsRaydProcess(pid)) continue;  // its trial ended meanwhile
    all.emplace_back(pid, host);
    if (ticks[pid] >= 0 && CpuTicks(pid) > ticks[pid]) busy.emplace_back(pid, host);
  }
  if (all.empty()) return std::nullopt;
  const auto& from = busy.empty() ? all : busy;
  return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng_)];
}

int ChaosDriver::PickTrainingHost() {
  if (auto rank = PickRank()) return rank->second;
  return std::uniform_int_distribution<int>(kFirstTrainingHost, kHosts - 1)(rng_);
}

void ChaosDriver::KillWorker(Fault& f) {
  std::optional<std::pair<pid_t, int>> rank;
  // A rank picked as its trial ends may be gone by now: pick again.
  Until([&] { return (rank = PickRank()) && IsRaydProcess(rank->first); }, kSettle);
  if (!rank || !IsRaydProcess(rank->first)) {
    std::string pids;
    for (int host = kFirstTrainingHost; host < kHosts; ++host) {
      for (pid_t pid : cluster_.bed().Pids(host)) pids += " " + std::to_string(pid);
    }
    FAIL("no live LEASED worker on a training host; their processes:"
         << pids << "\nrayd list workers: " << cluster_.last_output());
  }
  Mark(f);
  ::kill(rank->first, SIGKILL);
  f.detail = "rank pid " + std::to_string(rank->first) + " on host " + std::to_string(rank->second);
}

void ChaosDriver::KillNode(Fault& f) {
  const int host = PickTrainingHost();
  std::string node_id;
  const json status = cluster_.Status();
  for (const auto& n : status.at("nodes")) {
    if (n.at("ip") == cluster_.bed().ip(host) && n.at("state") == "ALIVE") {
      node_id = n.at("node_id");
    }
  }
  const std::vector<pid_t> pids = cluster_.bed().Pids(host);
  Mark(f);
  cluster_.bed().KillHost(host);
  REQUIRE(WaitFor([&] { return std::all_of(pids.begin(), pids.end(), ProcessGone); }, kSettle));
  // The machine comes back once the head has given its node up.
  if (!node_id.empty()) {
    REQUIRE(Until([&] { return cluster_.NodeState(node_id) == "DEAD"; }, kSettle));
  }
  cluster_.StartNode(host, {"--num-cpus", "2"});
  f.detail = "host " + std::to_string(host) + " (node " + node_id.substr(0, 8) + ", " +
             std::to_string(pids.size()) + " processes), restarted";
}

void ChaosDriver::CutLink(Fault& f) {
  const int host = PickTrainingHost();
  const double cut_s = std::uniform_real_distribution<double>(1, 6)(rng_);
  Mark(f);
  cluster_.bed().SetLink(host, false);
  Wait(cut_s);
  cluster_.bed().SetLink(host, true);
  char detail[64];
  std::snprintf(detail, sizeof detail, "host %d cut off for %.1f s", host, cut_s);
  f.detail = detail;
}

void ChaosDriver::KillHead(Fault& f) {
  const std::vector<pid_t> heads = LiveDaemons(cluster_.bed().root(kHeadHost));
  REQUIRE(heads.size() == 1);
  launching_ = false;  // no new sweep's driver starts while there is no head
  Mark(f);
  ::kill(heads[0], SIGKILL);
  REQUIRE(WaitFor([&] { return ProcessGone(heads[0]); }, kSettle));
  cluster_.RestartHead();
  launching_ = true;
  f.detail = "head pid " + std::to_string(heads[0]) + ", restarted with the same flags";
}

void ChaosDriver::KillDriver(Fault& f) {
  Mark(f);
  sweeps_.KillDriverAndResume();
  f.detail = "rayd tune of " + sweeps_.current().name + ", resumed";
}

}  // namespace rayd::testing::chaos
