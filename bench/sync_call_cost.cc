// sync_call_cost: what one synchronous call costs the driver, for a task
// (`rayd::Task(Echo).Remote(i).Get()`) and for a call on one actor, against a running cluster.
//
//   sync_call_cost --address 127.0.0.1:6380 [--calls 2000] [--warmup 200] [--temp-dir DIR]
//
// Prints wall-clock microseconds per call for each phase. Under callgrind
// (bench/callgrind_sync.sh runs it so) each phase also ends in a dump of its own, named by the
// phase ("tasks", "actor_calls"), whose total over N calls is the driver's instructions per
// call; outside valgrind the client requests are no-ops.
//
// Why ZERO_STATS + DUMP_STATS_AT rather than TOGGLE_COLLECT: callgrind's collect state is per
// thread, so a toggle in main() would count main()'s thread only and miss the runtime's own
// threads (its event loop does most of the work of a call). Zeroing and dumping act on every
// thread, so each dump holds all the driver's threads over exactly that phase. Run it with
// collection on (callgrind's default --collect-atstart=yes).
//
// Workers re-run this executable (Init with argc/argv, as examples/quickstart does), natively:
// valgrind traces the driver only. Without --address, RAYD_ADDRESS or else an embedded cluster
// is used (its daemons then run in this process and are counted too: not the figure we want).

#include <rayd/api.h>
// Without valgrind's headers the figures are wall-clock only (the requests are no-ops anyway).
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(name) ((void)(name))
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

namespace {

int Echo(int x) { return x; }

class Sink {
 public:
  static Sink* Create() { return new Sink(); }
  int Call(int x) { return x; }
};
RAYD_REMOTE(Echo, Sink::Create, &Sink::Call);

struct Options {
  rayd::RaydConfig config;
  int calls = 2000;
  int warmup = 200;
  std::string error;  // non-empty: bad command line
};

// Tolerant by design: a worker re-runs this executable with no arguments, and Init must see it
// before anything can fail (it never returns in a worker).
Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) {
      o.error = "missing value after " + std::string(flag);
      break;
    }
    const std::string value = argv[++i];
    if (flag == "--address") {
      o.config.address = value;
    } else if (flag == "--token") {
      o.config.token = value;
    } else if (flag == "--temp-dir") {
      o.config.temp_dir = value;
    } else if (flag == "--calls") {
      o.calls = std::atoi(value.c_str());
    } else if (flag == "--warmup") {
      o.warmup = std::atoi(value.c_str());
    } else {
      o.error = "unknown flag " + std::string(flag);
      break;
    }
  }
  if (o.error.empty() && (o.calls <= 0 || o.warmup < 0))
    o.error = "--calls must be > 0 and --warmup >= 0";
  return o;
}

using Clock = std::chrono::steady_clock;

// Runs `call(i)` for i in [0, n) as one measured phase: its own callgrind dump named `name`,
// and wall-clock microseconds per call, which it returns. `call` checks what came back.
template <typename Call>
double Phase(const char* name, int n, Call call) {
  CALLGRIND_ZERO_STATS;
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) call(i);
  const auto end = Clock::now();
  CALLGRIND_DUMP_STATS_AT(name);
  return std::chrono::duration<double, std::micro>(end - start).count() / n;
}

void Check(int got, int want, const char* what) {
  if (got == want) return;
  std::cerr << "sync_call_cost: " << what << " returned " << got << ", expected " << want << "\n";
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (!o.error.empty()) {
    std::cerr << "sync_call_cost: " << o.error
              << "\nusage: sync_call_cost [--address HOST:PORT] [--token T] [--temp-dir DIR] "
                 "[--calls N] [--warmup W]\n";
    return 2;
  }
  rayd::Init(o.config, argc, argv);

  double task_us = 0, actor_us = 0;
  try {
    auto task = [](int i) { Check(*rayd::Task(Echo).Remote(i).Get(), i, "Echo"); };
    auto actor = rayd::Actor(Sink::Create).Remote();
    auto actor_call = [&actor](int i) {
      Check(*actor.Task(&Sink::Call).Remote(i).Get(), i, "Sink::Call");
    };
    // Warm-up: workers leased and started, the actor placed, connections and caches made.
    for (int i = 0; i < o.warmup; ++i) task(i);
    for (int i = 0; i < o.warmup; ++i) actor_call(i);

    task_us = Phase("tasks", o.calls, task);
    actor_us = Phase("actor_calls", o.calls, actor_call);
    actor.Kill();
  } catch (const rayd::RaydError& e) {
    std::cerr << "sync_call_cost: " << e.what() << "\n";
    rayd::Shutdown();
    return 1;
  }

  std::cout << "calls per phase: " << o.calls << " (warm-up " << o.warmup << ")\n";
  std::printf("wall us per sync task: %.2f\n", task_us);
  std::printf("wall us per sync actor call: %.2f\n", actor_us);
  std::fflush(stdout);
  rayd::Shutdown();
  return 0;
}
