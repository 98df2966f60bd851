// A block's column copied out for comparison, shared by the data tests: its fixed-size elements
// (num_rows x RowElements, row-major) or its byte strings, one per row. A missing column or
// another element size fails the test naming the column and the block's schema.
#pragma once

#include <rayd/data/block.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace rayd::testing {

inline const data::Column& RequireColumn(const data::Block& block, const std::string& name) {
  const data::Column* c = block.Find(name);
  INFO("column " << name << " in " << data::DescribeSchema(block.schema()));
  REQUIRE(c != nullptr);
  return *c;
}

template <typename T>
std::vector<T> Values(const data::Block& block, const std::string& name) {
  const data::Column& c = RequireColumn(block, name);
  REQUIRE(data::ItemSize(c.dtype()) == sizeof(T));
  std::vector<T> out(static_cast<size_t>(block.num_rows() * c.RowElements()));
  if (!out.empty()) std::memcpy(out.data(), c.data, out.size() * sizeof(T));
  return out;
}

inline std::vector<std::string> Strings(const data::Block& block, const std::string& name) {
  const data::Column& c = RequireColumn(block, name);
  REQUIRE(c.is_bytes());
  std::vector<std::string> out;
  for (int64_t r = 0; r < block.num_rows(); ++r) out.emplace_back(c.BytesAt(r));
  return out;
}

}  // namespace rayd::testing
