#pragma once
// What a sweep with several objectives writes at its end (TuneConfig::objectives): its Pareto
// front.

#include <rayd/tune/tuner.h>

#include <string>
#include <vector>

namespace rayd::tune::internal {

// Writes <experiment>/pareto_front.csv: a header, then one row per trial on the front
// (ResultGrid::ParetoFront), in trial order: trial_id, each objective's last value (as the
// trial reported it, not negated), each constraint's metric when not an objective, the trial's
// latest checkpoint and its config as JSON. A front with no trial writes the header alone.
// Throws RaydError when the file cannot be written (the Controller reports it and goes on).
void WriteParetoFront(const ResultGrid& grid);

}  // namespace rayd::tune::internal
