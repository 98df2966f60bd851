#include "rayd/base/files.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace rayd {

namespace fs = std::filesystem;

Status WriteFileAtomically(const std::string& path_text, const std::string& contents,
                           bool durable) {
  const fs::path path = path_text;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    return Status::Internal("cannot create " + path.parent_path().string() + ": " + ec.message());
  }
  fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return Status::Internal("cannot write " + temp.string());
  bool ok = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  ok = std::fflush(file) == 0 && ok;
  if (durable) ok = ::fsync(::fileno(file)) == 0 && ok;
  ok = std::fclose(file) == 0 && ok;
  if (ok) fs::rename(temp, path, ec);
  if (!ok || ec) {
    fs::remove(temp, ec);
    return Status::Internal("cannot write " + path.string());
  }
  return Status::Ok();
}

Status AppendToFile(const std::string& path_text, const std::string& contents) {
  const fs::path path = path_text;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << contents;
  out.flush();
  if (!out) return Status::Internal("cannot append to " + path.string());
  return Status::Ok();
}

}  // namespace rayd
