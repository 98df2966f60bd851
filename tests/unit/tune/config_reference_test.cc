// docs/config-reference.md against the parser: each section's table lists exactly the keys
// tune/src/config_file.cc accepts there, so the reference cannot drift from the code.

#include <rayd/tune/config_file.h>

#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "test_util.h"

namespace {

// Each "### heading" of the reference, with the first cells of its table rows: "| `key` | ...".
std::map<std::string, std::multiset<std::string>> DocumentedKeys(const std::string& text) {
  std::map<std::string, std::multiset<std::string>> sections;
  std::multiset<std::string>* current = nullptr;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("### ", 0) == 0) {
      current = &sections[line.substr(4)];
      continue;
    }
    if (current == nullptr || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    if (end != std::string::npos) current->insert(line.substr(3, end - 3));
  }
  return sections;
}

TEST_CASE("docs/config-reference.md lists every key of every section the parser accepts, and "
          "no other",
          "[tune][config]") {
  const std::string text = rayd::testing::ReadFile(RAYD_CONFIG_REFERENCE);
  REQUIRE_FALSE(text.empty());
  const auto documented = DocumentedKeys(text);
  std::set<std::string> parsed_sections;
  for (const auto& [section, keys] : rayd::tune::FileKeys()) {
    parsed_sections.insert(section);
    INFO("### " << section);
    auto it = documented.find(section);
    REQUIRE(it != documented.end());
    const std::multiset<std::string> want(keys.begin(), keys.end());
    CHECK(it->second == want);  // each key once, none missing, none the parser refuses
  }
  for (const auto& [section, keys] : documented) {
    if (keys.empty()) continue;  // prose
    INFO("### " << section);
    CHECK(parsed_sections.count(section) == 1);  // no table of a section the parser lacks
  }
}

}  // namespace
