// `format: images`: folders of JPEG and PNG files, one subfolder per class, as
// torchvision.datasets.ImageFolder reads them.
//
// `paths` are globs of root folders (or of image files). Each immediate subfolder of a root is a
// class; its images are found recursively (links followed), in ImageFolder's order: folders by
// their path, each folder's files by name. Classes are numbered in the sorted order of their
// names over all roots (or by their place in `classes: [NAME, ...]`, which then lists every
// class a folder may hold: a split that lacks some still numbers them alike). An image file
// given directly belongs to its parent folder's class. Rows are the roots' images in the order of
// `paths`, each root's by class. Only .jpg, .jpeg and .png files count (any case); files and
// folders whose names start with '.' and files directly in a root are ignored; a class folder
// with no image is an error, as it is in ImageFolder.
//
// Columns: image (uint8 [H, W, C], decoded; with `decode: false` the file's bytes), label
// (int64, the class's number), path (bytes). Options (image_decode.h): decode, size: [H, W]
// (without it, the first image's size, which every image must then have), mode: RGB|L,
// resize, classes. An image of another size than `size` is an error naming the file, its size
// and the expected one, unless `resize: true`. A corrupt image is an error naming the file (or
// skipped and counted, with on_error: skip); a file that cannot be opened is always an error.

#include <rayd/data/reader.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "../../files.h"
#include "../image_decode.h"

namespace rayd::data::internal::image_folder_format {
// A named namespace, not an anonymous one: unity builds put several formats in one unit.

bool IsImageName(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  std::string ext(name.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The images under `dir`, in ImageFolder's order (sorted(os.walk(dir, followlinks=True)), each
// folder's files sorted): folders by their whole path, then each folder's files by name.
Status ListImages(const std::string& dir, std::vector<std::string>& out) {
  namespace fs = std::filesystem;
  std::vector<std::string> folders, pending{dir};
  std::set<std::pair<dev_t, ino_t>> seen;  // a link back up the tree is walked once
  while (!pending.empty()) {
    const std::string at = std::move(pending.back());
    pending.pop_back();
    struct stat st {};
    if (::stat(at.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
    folders.push_back(at);
    std::error_code ec;
    for (fs::directory_iterator it(at, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code is_ec;
      if (!name.starts_with(".") && it->is_directory(is_ec)) pending.push_back(at + "/" + name);
    }
    if (ec) return Status::NotFound(at + ": cannot list the folder: " + ec.message());
  }
  std::sort(folders.begin(), folders.end());
  folders.erase(std::unique(folders.begin(), folders.end()), folders.end());
  for (const std::string& folder : folders) {
    std::vector<std::string> files;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code is_ec;
      if (!name.starts_with(".") && IsImageName(name) && !it->is_directory(is_ec)) {
        files.push_back(name);
      }
    }
    if (ec) return Status::NotFound(folder + ": cannot list the folder: " + ec.message());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) out.push_back(folder + "/" + f);
  }
  return Status::Ok();
}

class ImageFolderReader : public Reader {
 public:
  static Result<std::unique_ptr<Reader>> Open(const DatasetSpec& spec,
                                              const std::vector<std::string>& files);
  const Schema& schema() const override { return schema_; }
  int64_t num_rows() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t skipped_rows() const override { return skipped_; }
  Result<Block> Read(std::span<const int64_t> rows) override;

 private:
  // Finds the images and their classes.
  Status FindImages(const std::vector<std::string>& files, const std::vector<std::string>& classes);
  // Without a size option: the first image's (the first readable one's, with on_error: skip).
  Status SizeFromFirstImage();

  ImageOptions options_;
  bool skip_ = false;
  std::vector<std::string> paths_;  // per row
  std::vector<int64_t> labels_;     // per row
  Schema schema_;
  int64_t skipped_ = 0;
};

Result<std::vector<std::string>> ParseClasses(const nlohmann::json& options) {
  std::vector<std::string> classes;
  if (!options.contains("classes")) return classes;
  const nlohmann::json& c = options["classes"];
  if (!c.is_array() || c.empty()) {
    return Status::InvalidArgument("classes: expected a list of class (folder) names");
  }
  for (const nlohmann::json& name : c) {
    if (!name.is_string()) {
      return Status::InvalidArgument("classes: expected folder names, got " + name.dump());
    }
    if (std::find(classes.begin(), classes.end(), name.get<std::string>()) != classes.end()) {
      return Status::InvalidArgument("classes: '" + name.get<std::string>() + "' is listed twice");
    }
    classes.push_back(name.get<std::string>());
  }
  return classes;
}

Status ImageFolderReader::FindImages(const std::vector<std::string>& files,
                                     const std::vector<std::string>& classes) {
  // (class, image) in row order; numbered once every class is known.
  std::vector<std::pair<std::string, std::string>> found;
  std::map<std::string, std::string> class_folders;  // a folder of each class, for messages
  for (const std::string& match : files) {
    const std::string path = WithoutTrailingSlashes(match);
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (std::filesystem::is_directory(status)) {
      std::vector<std::string> names;
      for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end;
           it.increment(ec)) {
        const std::string name = it->path().filename().string();
        std::error_code is_ec;
        if (!name.starts_with(".") && it->is_directory(is_ec)) names.push_back(name);
      }
      if (ec) return Status::NotFound(path + ": cannot list the folder: " + ec.message());
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        std::vector<std::string> images;
        RAYD_RETURN_IF_ERROR(ListImages(path + "/" + name, images));
        class_folders.emplace(name, path + "/" + name);
        for (std::string& image : images) found.emplace_back(name, std::move(image));
      }
    } else if (std::filesystem::is_regular_file(status) && IsImageName(path)) {
      const std::filesystem::path parent = std::filesystem::path(path).parent_path();
      const std::string name = std::filesystem::absolute(parent).filename().string();
      class_folders.emplace(name, parent.string());
      found.emplace_back(name, path);
    } else {
      return Status::InvalidArgument(path +
                                     ": neither a folder of class folders nor a .jpg, "
                                     ".jpeg or .png file");
    }
  }
  std::map<std::string, int64_t> images_of;  // per class
  for (const auto& [name, image] : found) ++images_of[name];
  std::map<std::string, int64_t> label_of;
  if (classes.empty()) {
    for (const auto& [name, folder] : class_folders) {  // sorted by name
      if (images_of[name] == 0) {
        return Status::InvalidArgument(folder + ": the class folder '" + name +
                                       "' holds no .jpg, .jpeg or .png file");
      }
      label_of.emplace(name, static_cast<int64_t>(label_of.size()));
    }
  } else {
    for (size_t i = 0; i < classes.size(); ++i) label_of.emplace(classes[i], i);
    for (const auto& [name, folder] : class_folders) {
      if (!label_of.contains(name)) {
        return Status::InvalidArgument(folder + ": the class folder '" + name +
                                       "' is not in classes");
      }
    }
  }
  if (found.empty()) {
    std::string where;
    for (const std::string& f : files) where += (where.empty() ? "" : ", ") + f;
    return Status::InvalidArgument("no .jpg, .jpeg or .png file in class folders under " + where);
  }
  for (auto& [name, image] : found) {
    labels_.push_back(label_of.at(name));
    paths_.push_back(std::move(image));
  }
  return Status::Ok();
}

Status ImageFolderReader::SizeFromFirstImage() {
  Status first_error;
  for (const std::string& path : paths_) {
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    Result<ImageInfo> info = ReadImageInfo(bytes->view(), path);
    if (info.ok()) {
      options_.height = info->height;
      options_.width = info->width;
      options_.size_from = path;
      return Status::Ok();
    }
    if (!skip_) return info.status();
    if (first_error.ok()) first_error = info.status();
  }
  return first_error;  // on_error: skip and no image could be read
}

Result<std::unique_ptr<Reader>> ImageFolderReader::Open(const DatasetSpec& spec,
                                                        const std::vector<std::string>& files) {
  auto reader = std::make_unique<ImageFolderReader>();
  RAYD_ASSIGN_OR_RETURN(reader->options_, ParseImageOptions(spec.options, /*decode=*/true));
  RAYD_ASSIGN_OR_RETURN(const std::vector<std::string> classes, ParseClasses(spec.options));
  reader->skip_ = spec.skip_errors();
  RAYD_RETURN_IF_ERROR(reader->FindImages(files, classes));
  const ImageOptions& o = reader->options_;
  if (o.decode) {
    if (!o.has_size()) RAYD_RETURN_IF_ERROR(reader->SizeFromFirstImage());
    reader->schema_.push_back({"image", DType::kUInt8, {o.height, o.width, o.channels}});
  } else {
    reader->schema_.push_back({"image", DType::kBytes, {}});
  }
  reader->schema_.push_back({"label", DType::kInt64, {}});
  reader->schema_.push_back({"path", DType::kBytes, {}});
  return std::unique_ptr<Reader>(std::move(reader));
}

Result<Block> ImageFolderReader::Read(std::span<const int64_t> rows) {
  const ColumnSchema& image = schema_[0];
  const int64_t row_bytes = options_.decode ? Column{.schema = image}.RowBytes() : 0;
  // Decoded pixels go straight into the block's buffer, a skipped row's slot reused.
  auto pixels = std::make_shared<std::vector<uint8_t>>(
      std::max<size_t>(rows.size() * static_cast<size_t>(row_bytes), 1));
  std::vector<std::string> encoded, paths;
  std::vector<int64_t> labels;
  int64_t kept = 0;
  for (const int64_t row : rows) {
    if (row < 0 || row >= num_rows()) {
      return Status::InvalidArgument("row " + std::to_string(row) + " is outside the dataset's " +
                                     std::to_string(num_rows()));
    }
    const std::string& path = paths_[row];
    RAYD_ASSIGN_OR_RETURN(std::shared_ptr<const FileBytes> bytes, FileBytes::Open(path));
    if (options_.decode) {
      Status decoded =
          DecodeToShape(bytes->view(), options_, pixels->data() + kept * row_bytes, path);
      if (!decoded.ok()) {
        if (!skip_) return decoded;
        ++skipped_;
        continue;
      }
    } else {
      encoded.emplace_back(bytes->view());
    }
    labels.push_back(labels_[row]);
    paths.push_back(path);
    ++kept;
  }
  BlockBuilder out(kept);
  if (options_.decode) {
    out.AddColumn(Column{.schema = image, .data = pixels->data()}, pixels);
  } else {
    out.AddBytes("image", encoded);
  }
  uint8_t* to = out.AddFixed(schema_[1]);
  if (!labels.empty()) std::memcpy(to, labels.data(), labels.size() * sizeof(int64_t));
  out.AddBytes("path", paths);
  return std::move(out).Finish();
}

const bool registered = RegisterFormat("images", ImageFolderReader::Open);

}  // namespace rayd::data::internal::image_folder_format
