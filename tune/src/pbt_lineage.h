#pragma once
// PBT's lineage logs in Ray's layout, written by the Tuner as it applies each exploit:
// pbt_global.txt (every exploit of the sweep) and pbt_policy_<trial>.txt (a trial's whole
// lineage: the donor's file copied over the target's, then the new line), one JSON policy line
// per exploit, [target, donor, target iteration, donor iteration, donor config, new config]
// (Decision::lineage). A file that cannot be written is warned about, never fatal.
//
// Threading: the controller's thread.

#include <nlohmann/json.hpp>
#include <string>

#include "result_sink.h"

namespace rayd::tune::internal {

class PbtLineageLog : public ResultSink {
 public:
  explicit PbtLineageLog(std::string dir) : dir_(std::move(dir)) {}

  // Appends one exploit's policy line.
  void Append(const nlohmann::json& policy) const;
  void OnExploit(const nlohmann::json& lineage) override { Append(lineage); }

 private:
  std::string dir_;
};

}  // namespace rayd::tune::internal
