#pragma once
// The wire side of submitted jobs (`rayd job`): JobSubmissionInfo to and from its Cap'n Proto
// struct, and a working directory packed into a submission and unpacked on the head.
//
// A packed directory holds its directories and regular files (a link to a file is packed as
// the file it names) with their permission bits; `.git` directories, sockets and devices are
// left out. Unpacking refuses absolute paths and `..`: a submission writes only inside the
// directory it is unpacked into.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rayd/base/status.h"
#include "rayd/protocol/gcs.capnp.h"
#include "rayd/runtime/cluster.h"

namespace rayd::runtime {

// What a submission's runtime environment (--runtime-env-json) asks for: Ray's runtime env,
// of which a job takes env_vars (checked as rayd::internal::EnvVarsOf checks a task's) and
// working_dir (shipped by the client). InvalidArgument naming any other field.
struct JobRuntimeEnv {
  std::map<std::string, std::string> env_vars;
  std::string working_dir;
};
Result<JobRuntimeEnv> ParseJobRuntimeEnv(const std::string& json);

void ToWire(const JobSubmissionInfo& job, proto::JobSubmission::Builder out);
JobSubmissionInfo FromWire(proto::JobSubmission::Reader in);

// One entry of a working directory.
struct PackedEntry {
  std::string relative;  // '/'-separated
  uint32_t mode = 0;
  bool is_directory = false;
  std::string data;  // a file's bytes
};

// The entries under `dir`, parents before children, files read; InvalidArgument when it is no
// directory or cannot be read, ResourceExhausted when its files add up to more than
// `max_bytes`.
Result<std::vector<PackedEntry>> ReadWorkingDir(const std::string& dir, uint64_t max_bytes);
// Fills `out` (sized entries.size()) with the entries.
void PackWorkingDir(const std::vector<PackedEntry>& entries,
                    capnp::List<proto::PackedFile>::Builder out);
// Writes `files` under `into` (which exists); InvalidArgument for a path that would leave it.
Status UnpackWorkingDir(capnp::List<proto::PackedFile>::Reader files, const std::string& into);

}  // namespace rayd::runtime
