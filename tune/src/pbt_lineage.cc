#include "pbt_lineage.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

namespace rayd::tune::internal {

namespace fs = std::filesystem;

void PbtLineageLog::Append(const nlohmann::json& policy) const {
  if (!policy.is_array() || policy.size() < 2) return;
  const std::string target_id = policy[0].get<std::string>();
  const std::string donor_id = policy[1].get<std::string>();
  const fs::path dir = dir_;
  const fs::path target = dir / ("pbt_policy_" + target_id + ".txt");
  const fs::path source = dir / ("pbt_policy_" + donor_id + ".txt");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (fs::exists(source, ec)) {
    fs::copy_file(source, target, fs::copy_options::overwrite_existing, ec);
  }
  for (const fs::path& path : {dir / "pbt_global.txt", target}) {
    std::ofstream out(path, std::ios::app);
    out << policy.dump() << "\n";
    if (!out) spdlog::warn("pbt: cannot append to {}", path.string());
  }
}

}  // namespace rayd::tune::internal
