// EpochOrder and each rank's rows.

#include <rayd/data/order.h>

#include <algorithm>
#include <numeric>

namespace rayd::data {

std::vector<int64_t> EpochOrder(int64_t num_rows, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(num_rows, 0)));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  SplitMix64 random(seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) + 1) * 0xD1B54A32D192ED03ull);
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[random.Below(i)]);
  }
  return order;
}

int64_t RowsPerRank(int64_t num_rows, int world) {
  return world > 0 ? std::max<int64_t>(num_rows, 0) / world : 0;
}

namespace {

// The steps of a deal: `full` steps of batch_size rows each, then the last step's rows (0: none),
// which replace the last full step when the tail was merged into it.
struct Deal {
  int64_t full = 0;
  int64_t last = 0;     // rows of the final, uneven step over all ranks (0: none)
  bool merged = false;  // the final step is the last full one grown by the tail
  int64_t left_out = 0;
};

Deal Plan(int64_t n, int world, int64_t batch_size, bool drop_last) {
  Deal d;
  const int64_t step_rows = batch_size * world;
  d.full = n / step_rows;
  const int64_t tail = n - d.full * step_rows;
  if (tail == 0) return d;
  if (drop_last || (d.full == 0 && tail < world)) {
    d.left_out = tail;
  } else if (tail >= world) {
    d.last = tail;
  } else {
    d.merged = true;
    d.full -= 1;
    d.last = step_rows + tail;
  }
  return d;
}

}  // namespace

int64_t StepCount(int64_t num_rows, int world, int64_t batch_size, bool drop_last) {
  const Deal d = Plan(num_rows, std::max(world, 1), std::max<int64_t>(batch_size, 1), drop_last);
  return d.full + (d.last > 0 ? 1 : 0);
}

StepRows RankStepRows(int64_t num_rows, int world, int rank, int64_t batch_size, bool drop_last,
                      int64_t step) {
  batch_size = std::max<int64_t>(batch_size, 1);
  world = std::max(world, 1);
  const Deal d = Plan(num_rows, world, batch_size, drop_last);
  const int64_t step_rows = batch_size * world;
  if (step < d.full) return {step * step_rows + rank * batch_size, batch_size};
  // The final, uneven step: ranks below last mod W take one row more; rank r's part starts
  // after the lower ranks'.
  const int64_t base = d.last / world, extra = d.last % world;
  return {d.full * step_rows + rank * base + std::min<int64_t>(rank, extra),
          base + (rank < extra ? 1 : 0)};
}

RankShare DealRank(std::span<const int64_t> order, int world, int rank, int64_t batch_size,
                   bool drop_last) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t steps = StepCount(n, world, batch_size, drop_last);
  RankShare share;
  share.left_out =
      Plan(n, std::max(world, 1), std::max<int64_t>(batch_size, 1), drop_last).left_out;
  share.rows.reserve(static_cast<size_t>(n / std::max(world, 1) + 1));
  for (int64_t s = 0; s < steps; ++s) {
    const StepRows step = RankStepRows(n, world, rank, batch_size, drop_last, s);
    share.rows.insert(share.rows.end(), order.begin() + step.first,
                      order.begin() + step.first + step.count);
    share.steps.push_back(step.count);
  }
  return share;
}

int64_t RowsAfterSteps(int64_t num_rows, int world, int64_t batch_size, bool drop_last,
                       int64_t steps) {
  batch_size = std::max<int64_t>(batch_size, 1);
  world = std::max(world, 1);
  const Deal d = Plan(num_rows, world, batch_size, drop_last);
  if (steps <= d.full) return steps * batch_size * world;
  return d.full * batch_size * world + d.last;  // the final step covers the rest it deals
}

}  // namespace rayd::data
