#pragma once
// TensorBoard's event files: TFRecord framing around serialized Event messages
// (tune/proto/tensorboard_event.proto). Each record is
//   u64 length, u32 masked CRC-32C of the length, the bytes, u32 masked CRC-32C of the bytes
// (little-endian; the mask is TFRecord's, rotate right by 15 plus 0xa282ead8), and a file
// starts with an Event whose file_version is "brain.Event:2".

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "rayd/base/status.h"
#include "tensorboard_event.pb.h"  // generated from tune/proto/

namespace rayd::tune::internal {

// CRC-32C (Castagnoli) of `data`, as TFRecord computes it.
uint32_t Crc32c(std::string_view data);

class EventFileWriter {
 public:
  // Creates `path` and writes the file_version event. Unavailable names the path if it cannot.
  static Result<EventFileWriter> Create(const std::string& path, double wall_time);

  // Appends one scalar per (tag, value) at `step`, in one event, to what Flush (or the
  // destructor) writes.
  Status WriteScalars(int64_t step, double wall_time,
                      const std::vector<std::pair<std::string, double>>& scalars);
  Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::ofstream out)
      : path_(std::move(path)), out_(std::move(out)) {}
  Status Write(const rayd::tensorboard::Event& event);

  std::string path_;
  std::ofstream out_;
};

// Every event of the file at `path`, each record's CRCs checked: InvalidArgument naming the
// record that is truncated or corrupt.
Result<std::vector<rayd::tensorboard::Event>> ReadEventFile(const std::string& path);

}  // namespace rayd::tune::internal
