// The format registry, globs and the datasets: section's entries.

#include <glob.h>
#include <rayd/data/reader.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace rayd::data {
namespace {

struct FormatRegistry {
  std::mutex mu;
  std::map<std::string, ReaderFactory> formats;
};
FormatRegistry& Formats() {
  static FormatRegistry* registry = new FormatRegistry();  // never destroyed: formats register at load
  return *registry;
}

}  // namespace

bool RegisterFormat(const std::string& name, ReaderFactory factory) {
  FormatRegistry& r = Formats();
  std::lock_guard lock(r.mu);
  r.formats[name] = factory;
  return true;
}

std::vector<std::string> RegisteredFormats() {
  FormatRegistry& r = Formats();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, factory] : r.formats) out.push_back(name);
  return out;
}

Result<std::vector<std::string>> ExpandGlob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR | GLOB_BRACE, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (out.empty()) {
    return Status::NotFound("'" + pattern + "' matches no file");
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::unique_ptr<Reader>> OpenReader(const DatasetSpec& spec) {
  ReaderFactory factory = nullptr;
  {
    FormatRegistry& r = Formats();
    std::lock_guard lock(r.mu);
    auto it = r.formats.find(spec.format);
    if (it != r.formats.end()) factory = it->second;
  }
  const std::string prefix = "datasets." + spec.name + ": ";
  if (factory == nullptr) {
    std::string known;
    for (const std::string& f : RegisteredFormats()) known += (known.empty() ? "" : ", ") + f;
    return Status::InvalidArgument(prefix + "format: unknown format '" + spec.format +
                                   "' (this build reads: " + known + ")");
  }
  std::vector<std::string> files;
  for (const std::string& pattern : spec.paths) {
    Result<std::vector<std::string>> matched = ExpandGlob(pattern);
    if (!matched.ok()) return Status::NotFound(prefix + "paths: " + matched.status().message());
    for (std::string& f : *matched) {
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(std::move(f));
    }
  }
  Result<std::unique_ptr<Reader>> reader = factory(spec, files);
  if (!reader.ok()) {
    return Status(reader.status().code(), prefix + reader.status().message());
  }
  return reader;
}

Result<DatasetSpec> ParseDatasetSpec(const std::string& name, const nlohmann::json& entry) {
  const std::string prefix = "datasets." + name;
  if (!entry.is_object()) {
    return Status::InvalidArgument(prefix + ": expected a map with format and paths");
  }
  DatasetSpec spec;
  spec.name = name;
  if (!entry.contains("format") || !entry["format"].is_string()) {
    return Status::InvalidArgument(prefix + ".format: required (one of the formats rayd reads)");
  }
  spec.format = entry["format"].get<std::string>();
  if (entry.contains("paths")) {
    const nlohmann::json& paths = entry["paths"];
    if (paths.is_string()) {
      spec.paths.push_back(paths.get<std::string>());
    } else if (paths.is_array() && !paths.empty()) {
      for (const nlohmann::json& p : paths) {
        if (!p.is_string()) return Status::InvalidArgument(prefix + ".paths: expected paths or globs");
        spec.paths.push_back(p.get<std::string>());
      }
    } else {
      return Status::InvalidArgument(prefix + ".paths: expected a path or a list of globs");
    }
  } else if (!entry.contains("columns")) {
    return Status::InvalidArgument(prefix + ".paths: required (a list of globs)");
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "format" && key != "paths") spec.options[key] = value;
  }
  if (spec.options.contains("on_error")) {
    const nlohmann::json& e = spec.options["on_error"];
    if (!e.is_string() || (e != "raise" && e != "skip")) {
      return Status::InvalidArgument(prefix + ".on_error: expected raise or skip");
    }
  }
  return spec;
}

Result<std::vector<DatasetSpec>> ParseDatasets(const nlohmann::json& datasets) {
  std::vector<DatasetSpec> out;
  if (datasets.is_null()) return out;
  if (!datasets.is_object()) {
    return Status::InvalidArgument("datasets: expected a map of names to datasets");
  }
  for (const auto& [name, entry] : datasets.items()) {
    RAYD_ASSIGN_OR_RETURN(DatasetSpec spec, ParseDatasetSpec(name, entry));
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace rayd::data
