// The in-memory TableStore: the default GCS storage, lost when the head exits. Every call
// completes before it returns, so callbacks run synchronously on the caller's stack.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gcs/table_store.h"

namespace rayd::gcs {
namespace {

class InMemoryTableStore final : public TableStore {
 public:
  void Put(const std::string& table, const std::string& key, std::string value, bool overwrite,
           Callback<bool> cb) override {
    auto& rows = tables_[table];
    auto it = rows.find(key);
    if (it == rows.end()) {
      rows.emplace(key, std::move(value));
      cb(true);
      return;
    }
    if (overwrite) it->second = std::move(value);
    cb(false);
  }

  void Get(const std::string& table, const std::string& key,
           Callback<std::optional<std::string>> cb) override {
    const auto* rows = Find(table);
    if (rows == nullptr) return cb(std::optional<std::string>());
    auto it = rows->find(key);
    cb(it == rows->end() ? std::nullopt : std::optional<std::string>(it->second));
  }

  void GetAll(const std::string& table, Callback<std::map<std::string, std::string>> cb) override {
    const auto* rows = Find(table);
    cb(rows == nullptr ? std::map<std::string, std::string>() : *rows);
  }

  void Delete(const std::string& table, const std::string& key, Callback<bool> cb) override {
    auto it = tables_.find(table);
    cb(it != tables_.end() && it->second.erase(key) > 0);
  }

  void DeleteByPrefix(const std::string& table, const std::string& prefix,
                      Callback<int64_t> cb) override {
    auto it = tables_.find(table);
    if (it == tables_.end()) return cb(int64_t{0});
    auto& rows = it->second;
    // Keys sharing a prefix are contiguous in the ordered map, starting at lower_bound(prefix).
    auto first = rows.lower_bound(prefix);
    auto last = first;
    int64_t count = 0;
    while (last != rows.end() && last->first.compare(0, prefix.size(), prefix) == 0) {
      ++last;
      ++count;
    }
    rows.erase(first, last);
    cb(count);
  }

  void Keys(const std::string& table, const std::string& prefix,
            Callback<std::vector<std::string>> cb) override {
    std::vector<std::string> keys;
    if (const auto* rows = Find(table)) {
      for (auto it = rows->lower_bound(prefix);
           it != rows->end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
        keys.push_back(it->first);
      }
    }
    cb(std::move(keys));
  }

  void Exists(const std::string& table, const std::string& key, Callback<bool> cb) override {
    const auto* rows = Find(table);
    cb(rows != nullptr && rows->count(key) > 0);
  }

  std::string Describe() const override { return "memory"; }

 private:
  using Rows = std::map<std::string, std::string>;

  // Lookups do not create empty tables.
  const Rows* Find(const std::string& table) const {
    auto it = tables_.find(table);
    return it == tables_.end() ? nullptr : &it->second;
  }

  std::map<std::string, Rows> tables_;
};

}  // namespace

std::unique_ptr<TableStore> MakeInMemoryTableStore() {
  return std::make_unique<InMemoryTableStore>();
}

}  // namespace rayd::gcs
