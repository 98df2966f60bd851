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

std::vector<int64_t> RankRows(std::span<const int64_t> order, int world, int rank,
                              int64_t batch_size) {
  const int64_t per_rank = RowsPerRank(static_cast<int64_t>(order.size()), world);
  batch_size = std::max<int64_t>(batch_size, 1);
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(per_rank));
  const int64_t full_steps = per_rank / batch_size;
  const int64_t step_rows = batch_size * world;
  for (int64_t s = 0; s < full_steps; ++s) {
    const int64_t at = s * step_rows + rank * batch_size;
    rows.insert(rows.end(), order.begin() + at, order.begin() + at + batch_size);
  }
  // The last, shorter step: what is left of each rank's share, one even part each.
  const int64_t tail = per_rank - full_steps * batch_size;
  if (tail > 0) {
    const int64_t at = full_steps * step_rows + rank * tail;
    rows.insert(rows.end(), order.begin() + at, order.begin() + at + tail);
  }
  return rows;
}

}  // namespace rayd::data
