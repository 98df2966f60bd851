#include "event_file.h"

#include <array>
#include <cstring>

namespace rayd::tune::internal {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;  // Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t MaskedCrc(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

void PutLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  const auto& table = CrcTable();
  uint32_t crc = 0xffffffffu;
  for (char c : data) crc = table[(crc ^ static_cast<uint8_t>(c)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

Result<EventFileWriter> EventFileWriter::Create(const std::string& path, double wall_time) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Unavailable("cannot create " + path);
  EventFileWriter writer(path, std::move(out));
  rayd::tensorboard::Event version;
  version.set_wall_time(wall_time);
  version.set_file_version("brain.Event:2");
  RAYD_RETURN_IF_ERROR(writer.Write(version));
  return writer;
}

Status EventFileWriter::WriteScalars(int64_t step, double wall_time,
                                     const std::vector<std::pair<std::string, double>>& scalars) {
  rayd::tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return Write(event);
}

Status EventFileWriter::Write(const rayd::tensorboard::Event& event) {
  const std::string data = event.SerializeAsString();
  std::string record;
  record.reserve(data.size() + 16);
  std::string length;
  PutLittleEndian(length, data.size(), 8);
  record += length;
  PutLittleEndian(record, MaskedCrc(length), 4);
  record += data;
  PutLittleEndian(record, MaskedCrc(data), 4);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  if (!out_) return Status::Unavailable("cannot write " + path_);
  return Status::Ok();
}

Status EventFileWriter::Flush() {
  out_.flush();
  if (!out_) return Status::Unavailable("cannot write " + path_);
  return Status::Ok();
}

Result<std::vector<rayd::tensorboard::Event>> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("no event file " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<rayd::tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string which = path + ": record " + std::to_string(events.size());
    if (bytes.size() - at < 12) return Status::InvalidArgument(which + " is truncated");
    const std::string_view length(bytes.data() + at, 8);
    if (GetLittleEndian(bytes.data() + at + 8, 4) != MaskedCrc(length)) {
      return Status::InvalidArgument(which + ": its length's CRC does not match");
    }
    const uint64_t size = GetLittleEndian(bytes.data() + at, 8);
    at += 12;
    if (bytes.size() - at < size + 4) return Status::InvalidArgument(which + " is truncated");
    const std::string_view data(bytes.data() + at, size);
    if (GetLittleEndian(bytes.data() + at + size, 4) != MaskedCrc(data)) {
      return Status::InvalidArgument(which + ": its data's CRC does not match");
    }
    rayd::tensorboard::Event event;
    if (!event.ParseFromArray(data.data(), static_cast<int>(data.size()))) {
      return Status::InvalidArgument(which + " is no Event message");
    }
    events.push_back(std::move(event));
    at += size + 4;
  }
  return events;
}

}  // namespace rayd::tune::internal
