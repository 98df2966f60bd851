#include "rayd/scheduler/resources.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

namespace rayd::scheduler {
namespace {

using Json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// Quotes user text for a one-line error message: control characters become escapes.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "-" + FormatBytes(bytes == kInt64Min ? kInt64Max : -bytes);
  if (bytes < 1024) return std::to_string(bytes) + "B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Move up while the value would print as "1024.00" or more.
  while (value >= 1023.995 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%s", value, kUnits[unit]);
  return buf;
}

// A JSON value shortened for an error message.
std::string ShortDump(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 2: msg";
// keep "msg" (the position is reported separately).
std::string JsonErrorDetail(const Json::exception& e) {
  std::string_view what = e.what();
  if (size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
  if (what.starts_with("parse error")) {
    if (size_t p = what.find(": "); p != std::string_view::npos) what.remove_prefix(p + 2);
  }
  return std::string(what);
}

// The flag that sets a predefined resource, or empty for custom names.
std::string_view FlagForPredefined(std::string_view name) {
  if (name == kCPU) return "--num-cpus";
  if (name == kGPU) return "--num-gpus";
  if (name == kMemory) return "--memory";
  if (name == kObjectStoreMemory) return "--object-store-memory";
  return {};
}

Result<FixedPoint> ParseAmount(std::string_view what, const std::string& key, const Json& value) {
  auto error = [&](std::string problem) {
    return Status::InvalidArgument(std::string(what) + ": " + Quote(key) + " " + problem);
  };
  const std::string too_large =
      "is too large; the maximum amount is " + std::to_string(FixedPoint::kMaxWhole);
  if (value.is_number_unsigned()) {
    auto whole = value.get<uint64_t>();
    if (whole > static_cast<uint64_t>(FixedPoint::kMaxWhole)) return error(too_large);
    return FixedPoint::FromWhole(static_cast<int64_t>(whole));
  }
  if (value.is_number_integer()) {
    auto whole = value.get<int64_t>();
    if (whole < 0) return error("must be a non-negative number, got " + ShortDump(value));
    if (whole > FixedPoint::kMaxWhole) return error(too_large);
    return FixedPoint::FromWhole(whole);
  }
  if (!value.is_number()) return error("must be a non-negative number, got " + ShortDump(value));
  double amount = value.get<double>();
  if (!(amount >= 0)) return error("must be a non-negative number, got " + ShortDump(value));
  if (amount > static_cast<double>(FixedPoint::kMaxWhole)) return error(too_large);
  double scaled = amount * FixedPoint::kScale;
  double rounded = std::round(scaled);
  // 0.3 * 10000 is 2999.9999999999995: allow for the binary representation, not more.
  if (std::abs(scaled - rounded) > std::max(1e-6, scaled * 1e-12)) {
    return error("= " + ShortDump(value) + " is finer than the resolution of resource amounts (" +
                 FixedPoint::FromUnits(1).ToString() + ")");
  }
  return FixedPoint::FromUnits(static_cast<int64_t>(rounded));
}

// Shared by ParseResourcesJson and ResourceSet::FromJson. `what` starts every message.
Result<ResourceSet> ParseResourceObject(std::string_view text, std::string_view what,
                                        bool reject_predefined) {
  const std::string prefix(what);
  if (Trim(text).empty()) {
    return Status::InvalidArgument(prefix +
                                   " is empty; expected a JSON object such as {\"tpu\": 1}");
  }
  Json doc;
  std::set<std::string> seen_keys;
  std::string duplicate_key;
  auto note_keys = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && duplicate_key.empty() &&
        !seen_keys.insert(parsed.get<std::string>()).second) {
      duplicate_key = parsed.get<std::string>();
    }
    return true;
  };
  try {
    doc = Json::parse(text.begin(), text.end(), note_keys);
  } catch (const Json::parse_error& e) {
    return Status::InvalidArgument(prefix + " is not valid JSON (at byte " +
                                   std::to_string(e.byte) + "): " + JsonErrorDetail(e));
  } catch (const Json::exception& e) {  // e.g. out_of_range for 1e400
    return Status::InvalidArgument(prefix + " is not valid JSON: " + JsonErrorDetail(e));
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument(prefix + " must be a JSON object such as {\"tpu\": 1}, got " +
                                   std::string(doc.type_name()));
  }
  if (!duplicate_key.empty()) {
    return Status::InvalidArgument(prefix + ": " + Quote(duplicate_key) + " is given twice");
  }
  ResourceSet resources;
  for (const auto& [key, value] : doc.items()) {
    if (key.empty()) return Status::InvalidArgument(prefix + ": resource names must not be empty");
    if (std::string_view flag = FlagForPredefined(key); reject_predefined && !flag.empty()) {
      return Status::InvalidArgument(prefix + ": " + Quote(key) +
                                     " is a predefined resource; use " + std::string(flag) +
                                     " instead");
    }
    RAYD_ASSIGN_OR_RETURN(FixedPoint amount, ParseAmount(what, key, value));
    resources.Set(key, amount);
  }
  return resources;
}

}  // namespace

bool IsMemoryResource(std::string_view name) {
  return name == kMemory || name == kObjectStoreMemory;
}

// ---- FixedPoint ----

FixedPoint FixedPoint::FromWhole(int64_t whole) {
  int64_t units;
  if (__builtin_mul_overflow(whole, kScale, &units)) units = whole > 0 ? kInt64Max : kInt64Min;
  return FixedPoint(units);
}

FixedPoint FixedPoint::FromDouble(double value) {
  if (std::isnan(value)) return FixedPoint();
  double scaled = value * kScale;
  if (scaled >= 0x1p63) return FixedPoint(kInt64Max);
  if (scaled <= -0x1p63) return FixedPoint(kInt64Min);
  return FixedPoint(std::llround(scaled));
}

std::string FixedPoint::ToString() const {
  uint64_t magnitude =
      units_ < 0 ? uint64_t{0} - static_cast<uint64_t>(units_) : static_cast<uint64_t>(units_);
  std::string out = units_ < 0 ? "-" : "";
  out += std::to_string(magnitude / kScale);
  if (uint64_t fraction = magnitude % kScale; fraction != 0) {
    char digits[8];
    std::snprintf(digits, sizeof(digits), "%04llu", static_cast<unsigned long long>(fraction));
    std::string_view frac(digits);
    frac = frac.substr(0, frac.find_last_not_of('0') + 1);
    out += '.';
    out += frac;
  }
  return out;
}

FixedPoint& FixedPoint::operator+=(FixedPoint other) {
  if (__builtin_add_overflow(units_, other.units_, &units_)) {
    units_ = other.units_ > 0 ? kInt64Max : kInt64Min;
  }
  return *this;
}

FixedPoint& FixedPoint::operator-=(FixedPoint other) {
  if (__builtin_sub_overflow(units_, other.units_, &units_)) {
    units_ = other.units_ < 0 ? kInt64Max : kInt64Min;
  }
  return *this;
}

// ---- ResourceSet ----

ResourceSet::ResourceSet(std::initializer_list<std::pair<std::string_view, double>> amounts) {
  for (const auto& [name, amount] : amounts) Set(name, FixedPoint::FromDouble(amount));
}

FixedPoint ResourceSet::Get(std::string_view name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? FixedPoint() : it->second;
}

void ResourceSet::Set(std::string_view name, FixedPoint amount) {
  if (amount <= FixedPoint()) {
    if (auto it = amounts_.find(name); it != amounts_.end()) amounts_.erase(it);
    return;
  }
  amounts_.insert_or_assign(std::string(name), amount);
}

bool ResourceSet::IsSubsetOf(const ResourceSet& available) const {
  return std::all_of(amounts_.begin(), amounts_.end(),
                     [&](const auto& entry) { return entry.second <= available.Get(entry.first); });
}

ResourceSet& ResourceSet::operator+=(const ResourceSet& other) {
  for (const auto& [name, amount] : other) Set(name, Get(name) + amount);
  return *this;
}

ResourceSet& ResourceSet::operator-=(const ResourceSet& other) {
  for (const auto& [name, amount] : other) Set(name, Get(name) - amount);  // Set drops <= 0
  return *this;
}

std::string ResourceSet::ToString() const {
  std::string out = "{";
  for (const auto& [name, amount] : amounts_) {
    if (out.size() > 1) out += ", ";
    out += name + ": " + FormatResourceAmount(name, amount);
  }
  return out + "}";
}

std::string ResourceSet::ToJson() const {
  Json doc = Json::object();
  for (const auto& [name, amount] : amounts_) {
    if (amount.units() % FixedPoint::kScale == 0) {
      doc[name] = amount.units() / FixedPoint::kScale;
    } else {
      doc[name] = amount.ToDouble();  // dumps as the shortest text that reads back the same
    }
  }
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<ResourceSet> ResourceSet::FromJson(std::string_view json_text) {
  return ParseResourceObject(json_text, "resources JSON", /*reject_predefined=*/false);
}

Result<ResourceSet> ParseResourcesJson(std::string_view json_text) {
  return ParseResourceObject(json_text, "--resources", /*reject_predefined=*/true);
}

// ---- Bytes ----

std::string FormatResourceAmount(std::string_view name, FixedPoint amount) {
  if (!IsMemoryResource(name)) return amount.ToString();
  int64_t units = amount.units();
  int64_t bytes = units / FixedPoint::kScale;
  int64_t rest = units % FixedPoint::kScale;  // round to the nearest byte, halves away from zero
  if (rest >= FixedPoint::kScale / 2) ++bytes;
  if (rest <= -FixedPoint::kScale / 2) --bytes;
  return FormatBytes(bytes);
}

Result<int64_t> ParseByteSize(std::string_view text) {
  constexpr std::string_view kExpected =
      "expected a number with an optional unit, e.g. 512MiB or 2GB";
  std::string_view s = Trim(text);
  if (s.empty()) return Status::InvalidArgument("byte size is empty; " + std::string(kExpected));
  if (s.front() == '-') {
    return Status::InvalidArgument("byte size " + Quote(text) + " must not be negative");
  }
  size_t end = s.find_first_not_of("0123456789.");
  std::string_view number = s.substr(0, end);
  std::string_view unit = Trim(s.substr(number.size()));
  bool has_digit = number.find_first_of("0123456789") != std::string_view::npos;
  if (!has_digit || std::count(number.begin(), number.end(), '.') > 1) {
    return Status::InvalidArgument("invalid byte size " + Quote(text) + ": " +
                                   std::string(kExpected));
  }
  // clang-format off
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1}, {"b", 1},
      {"kb", 1000}, {"mb", 1000'000}, {"gb", 1000'000'000}, {"tb", 1000'000'000'000},
      {"kib", 1LL << 10}, {"mib", 1LL << 20}, {"gib", 1LL << 30}, {"tib", 1LL << 40}};
  // clang-format on
  std::string lower(unit);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto* found = std::find_if(std::begin(kUnits), std::end(kUnits),
                                   [&](const auto& u) { return u.first == lower; });
  if (found == std::end(kUnits)) {
    return Status::InvalidArgument("unknown unit " + Quote(unit) + " in byte size " + Quote(text) +
                                   "; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  }
  const int64_t multiplier = found->second;
  const Status too_large =
      Status::InvalidArgument("byte size " + Quote(text) + " is too large; the maximum is " +
                              std::to_string(FixedPoint::kMaxWhole) + " bytes (" +
                              FormatBytes(FixedPoint::kMaxWhole) + ")");
  if (number.find('.') == std::string_view::npos) {  // integers stay exact
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    int64_t bytes;
    if (ec == std::errc::result_out_of_range || __builtin_mul_overflow(value, multiplier, &bytes) ||
        bytes > FixedPoint::kMaxWhole) {
      return too_large;
    }
    return bytes;
  }
  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) {
    return Status::InvalidArgument("invalid byte size " + Quote(text) + ": " +
                                   std::string(kExpected));
  }
  double bytes = std::round(value * static_cast<double>(multiplier));
  if (bytes > static_cast<double>(FixedPoint::kMaxWhole)) return too_large;
  return static_cast<int64_t>(bytes);
}

// ---- Labels ----

Result<Labels> ParseLabels(std::string_view text) {
  Labels labels;
  if (Trim(text).empty()) return labels;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = Trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) {
      return Status::InvalidArgument("empty label in " + Quote(text) +
                                     "; expected key=value pairs separated by commas");
    }
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("label " + Quote(item) + " has no '='; expected key=value");
    }
    std::string_view key = Trim(item.substr(0, eq));
    if (key.empty()) return Status::InvalidArgument("label " + Quote(item) + " has an empty key");
    if (!labels.emplace(std::string(key), std::string(Trim(item.substr(eq + 1)))).second) {
      return Status::InvalidArgument("label key " + Quote(key) + " is given twice");
    }
  }
  return labels;
}

// ---- NodeResources ----

NodeResources::NodeResources(ResourceSet total, Labels labels)
    : total_(std::move(total)), available_(total_), labels_(std::move(labels)) {}

NodeResources::NodeResources(ResourceSet total, ResourceSet available, Labels labels)
    : total_(std::move(total)), labels_(std::move(labels)) {
  for (const auto& [name, amount] : available) {
    available_.Set(name, std::min(amount, total_.Get(name)));
  }
}

bool NodeResources::TryAllocate(const ResourceSet& demand) {
  if (!IsAvailable(demand)) return false;
  available_ -= demand;
  return true;
}

void NodeResources::Release(const ResourceSet& amounts) {
  for (const auto& [name, amount] : amounts) {
    available_.Set(name, std::min(available_.Get(name) + amount, total_.Get(name)));
  }
}

}  // namespace rayd::scheduler
